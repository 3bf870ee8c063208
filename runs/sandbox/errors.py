"""What can go wrong at the sandbox boundary, as readable domain exceptions.

A rollout maps them to its status: SandboxTimeout -> timed_out, every other SandboxError -> errored.
"""


class SandboxError(Exception):
    """Base of every sandbox failure; str(error) is the readable reason."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class SandboxCrashed(SandboxError):
    """The sandbox process died, was killed, or stopped speaking the protocol; it is gone."""


class SandboxProtocolError(SandboxCrashed):
    """The sandbox sent something that is not a protocol message; it has been killed."""


class SandboxTimeout(SandboxError):
    """A call did not answer in time (step or episode wall clock); the sandbox has been killed."""


class UserCodeError(SandboxError):
    """Environment or agent code raised, or broke the contract; the sandbox is still alive.

    `kind` is the runner's error kind ("exception", "contract", "protocol", "limit"), `op` the call.
    """

    def __init__(self, message, *, kind="exception", op=None):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.op = op
