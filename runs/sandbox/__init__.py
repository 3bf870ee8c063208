"""Sandboxes: untrusted environment and agent code runs in runner.py, driven over protocol.py.

Every backend is a Sandbox (base.py): ProcessSandbox (process.py) and DockerSandbox (docker.py) side
by side, picked by name in backends.py. The worker uses one of them (or SandboxPool, or a lease from
shared_sandboxes when a version declares concurrent_sessions, which reads like one) and the
SandboxError family; nothing else crosses.
"""

from .base import EPISODE_SURFACE, Sandbox
from .config import DEFAULT_CONFIG, SandboxConfig, SandboxLimits, StepResult, default_python_path
from .errors import SandboxCrashed, SandboxError, SandboxProtocolError, SandboxTimeout, UserCodeError
from .pool import SandboxPool
from .process import ProcessSandbox
from .shared import EpisodeLease, SharedKey, SharedSandbox, SharedSandboxes, SharedSandboxFull, shared_sandboxes

__all__ = [
    "DEFAULT_CONFIG",
    "EPISODE_SURFACE",
    "EpisodeLease",
    "ProcessSandbox",
    "Sandbox",
    "SandboxConfig",
    "SandboxCrashed",
    "SandboxError",
    "SandboxLimits",
    "SandboxPool",
    "SandboxProtocolError",
    "SandboxTimeout",
    "SharedKey",
    "SharedSandbox",
    "SharedSandboxFull",
    "SharedSandboxes",
    "StepResult",
    "UserCodeError",
    "default_python_path",
    "shared_sandboxes",
]
