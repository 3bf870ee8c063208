"""Sandboxes: untrusted environment and agent code runs in runner.py, driven over protocol.py.

The worker uses ProcessSandbox (or SandboxPool) and the SandboxError family; nothing else crosses.
"""

from .errors import SandboxCrashed, SandboxError, SandboxProtocolError, SandboxTimeout, UserCodeError
from .pool import SandboxPool
from .process import DEFAULT_CONFIG, ProcessSandbox, SandboxConfig, SandboxLimits, StepResult, default_python_path

__all__ = [
    "DEFAULT_CONFIG",
    "ProcessSandbox",
    "SandboxConfig",
    "SandboxCrashed",
    "SandboxError",
    "SandboxLimits",
    "SandboxPool",
    "SandboxProtocolError",
    "SandboxTimeout",
    "StepResult",
    "UserCodeError",
    "default_python_path",
]
