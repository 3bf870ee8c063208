"""Sandboxes: untrusted environment and agent code runs in runner.py, driven over protocol.py.

The worker uses ProcessSandbox (or SandboxPool, or a lease from shared_sandboxes when a version
declares concurrent_sessions) and the SandboxError family; nothing else crosses.
"""

from .errors import SandboxCrashed, SandboxError, SandboxProtocolError, SandboxTimeout, UserCodeError
from .pool import SandboxPool
from .process import DEFAULT_CONFIG, ProcessSandbox, SandboxConfig, SandboxLimits, StepResult, default_python_path
from .shared import EpisodeLease, SharedKey, SharedSandbox, SharedSandboxes, SharedSandboxFull, shared_sandboxes

__all__ = [
    "DEFAULT_CONFIG",
    "EpisodeLease",
    "ProcessSandbox",
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
