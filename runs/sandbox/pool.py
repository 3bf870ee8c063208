"""A pool of pre-warmed runner processes: interpreter started (and chosen modules imported) ahead of
time, each waiting for `load`, so a rollout skips Python's start-up. Every sandbox is used once."""

from .config import DEFAULT_CONFIG, SandboxConfig, SandboxLimits
from .process import ProcessSandbox


class SandboxPool:
    """Keeps `size` spawned, unloaded sandboxes; `start()` hands one out loaded and spawns its replacement.

    Spawning only forks and execs (the interpreter starts up in the child, in parallel with the
    worker), so refilling inline costs a few milliseconds and needs no thread.
    """

    def __init__(self, size: int = 2, config: SandboxConfig = DEFAULT_CONFIG):
        self.size = size
        self.config = config
        self._idle: list[ProcessSandbox] = []
        self._closed = False

    def fill(self) -> None:
        while not self._closed and len(self._idle) < self.size:
            self._idle.append(ProcessSandbox(self.config).spawn())

    def acquire(self) -> ProcessSandbox:
        """A spawned sandbox waiting for `load` (a fresh one when the pool is empty or one died)."""
        self.fill()
        while self._idle:
            sandbox = self._idle.pop(0)
            if sandbox.alive:
                break
            sandbox.close()
        else:
            sandbox = ProcessSandbox(self.config).spawn()
        sandbox.pooled = True
        self.fill()
        return sandbox

    def start(self, files, mode="env", entrypoint="env:Environment", limits: SandboxLimits | dict | None = None):
        """Like ProcessSandbox().start(...), from the pool; returns the loaded sandbox."""
        sandbox = self.acquire()
        sandbox.load(files, mode=mode, entrypoint=entrypoint, limits=limits)
        return sandbox

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()

    def __enter__(self) -> "SandboxPool":
        self.fill()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
