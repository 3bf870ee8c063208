"""Sandbox backends by name: settings.SANDBOX_BACKEND ("process" or "docker") picks the class."""

from .base import Sandbox
from .process import ProcessSandbox

BACKENDS = ("process", "docker")


def sandbox_class(backend: str = "process") -> type[Sandbox]:
    """The sandbox class for a backend name; every one is a Sandbox (base.py)."""
    name = (backend or "process").strip().lower()
    if name == "process":
        return ProcessSandbox
    if name == "docker":
        from .docker import DockerSandbox  # noqa: PLC0415 - only docker deployments import it

        return DockerSandbox
    raise ValueError(f"unknown sandbox backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def sandbox_for(backend: str = "process", *args, **kwargs) -> Sandbox:
    """A new, unstarted sandbox of that backend (arguments go to the class)."""
    return sandbox_class(backend)(*args, **kwargs)
