"""One control group per sandbox: memory, process count and CPU bound for the whole process tree.

RLIMIT_AS binds each process, so six forked children may each hold memory_mb; a cgroup counts them
together (and the tmpfs pages they write). The group sits under the worker's own cgroup, in a
`studio-sandboxes` subtree: cgroup v2 where the unified hierarchy has the controllers, else the v1
hierarchies (hybrid hosts such as this one, where cgroup2 carries only hugetlb). The child joins its
group between fork and exec (`join_fds`), so nothing it forks is ever outside it.

Where the kernel or the host refuses (not root, no delegation), `SandboxCgroup.create` returns None
and says why; the sandbox records the missing layer.
"""

import os
import signal
import time
import uuid
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SUBTREE = "studio-sandboxes"
V1_CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
MB = 1024 * 1024


def _own_paths() -> dict[str, str]:
    """controller ("" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                _hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
    except OSError:
        pass
    return paths


def _v2_mount() -> Path | None:
    """The cgroup2 mount point when it offers memory, pids and cpu."""
    for candidate in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        try:
            controllers = (candidate / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if {"memory", "pids", "cpu"} <= set(controllers):
            return candidate
    return None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


class SandboxCgroup:
    """The cgroup(s) of one sandbox: `create`, `limit`, `join_fds` (for the child), `kill`, `remove`."""

    def __init__(self, version: int, dirs: dict[str, Path]):
        self.version = version
        self.dirs = dirs  # controller -> directory (v2: one directory under "")
        self.memory_limit_mb: int | None = None

    @classmethod
    def create(cls, prefix: str = "sb-") -> tuple["SandboxCgroup | None", str]:
        """A fresh group named `prefix` + a random part (None and the reason when the host refuses one)."""
        name = f"{prefix}{uuid.uuid4().hex[:16]}"
        own = _own_paths()
        mount = _v2_mount()
        dirs: dict[str, Path] = {}
        try:
            if mount is not None:
                base = mount / own.get("", "/").lstrip("/") / SUBTREE
                if not base.is_dir():
                    base.mkdir()
                    # The subtree's children get the controllers (fails where the parent is not delegated).
                    _write(base.parent / "cgroup.subtree_control", "+memory +pids +cpu")
                    _write(base / "cgroup.subtree_control", "+memory +pids +cpu")
                path = base / name
                path.mkdir()
                return cls(2, {"": path}), ""
            dirs = {}
            for controller in V1_CONTROLLERS:
                hierarchy = CGROUP_ROOT / controller
                if not (hierarchy / "cgroup.procs").exists():
                    raise OSError(f"no cgroup v1 {controller} hierarchy at {hierarchy}")
                path = hierarchy / own.get(controller, "/").lstrip("/") / SUBTREE / name
                path.mkdir(parents=True, exist_ok=True)
                dirs[controller] = path
            return cls(1, dirs), ""
        except OSError as exc:
            group = cls(1, dirs) if mount is None and dirs else None
            if group is not None:
                group.remove()
            return None, f"no cgroup for the sandbox ({exc})"

    @classmethod
    def remove_stale(cls, prefix: str) -> None:
        """Remove groups named `prefix`... left by a worker that died (the caller owns the prefix: its
        uid slot), killing what is still in them."""
        own = _own_paths()
        mount = _v2_mount()
        bases = (
            {"": mount / own.get("", "/").lstrip("/") / SUBTREE} if mount is not None
            else {c: CGROUP_ROOT / c / own.get(c, "/").lstrip("/") / SUBTREE for c in V1_CONTROLLERS}
        )
        stale: dict[str, dict[str, Path]] = {}
        for controller, base in bases.items():
            try:
                for entry in os.scandir(base):
                    if entry.is_dir() and entry.name.startswith(prefix):
                        stale.setdefault(entry.name, {})[controller] = Path(entry.path)
            except OSError:
                continue
        for dirs in stale.values():
            cls(2 if mount is not None else 1, dirs).remove()

    # -- limits ---------------------------------------------------------------------------------

    def limit(self, *, memory_mb: int | None = None, pids: int | None = None, cpus: float | None = None) -> None:
        """Set (or lower) the group's bounds; raises OSError when the kernel refuses one."""
        if memory_mb:
            self._memory(memory_mb)
        if pids:
            if self.version == 2:
                _write(self.dirs[""] / "pids.max", str(pids))
            else:
                _write(self.dirs["pids"] / "pids.max", str(pids))
        if cpus:
            quota = int(cpus * CPU_PERIOD_US)
            if self.version == 2:
                _write(self.dirs[""] / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:
                _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(quota))

    def _memory(self, memory_mb: int) -> None:
        value = str(memory_mb * MB)
        if self.version == 2:
            _write(self.dirs[""] / "memory.max", value)
            _write(self.dirs[""] / "memory.swap.max", "0")
        else:
            directory = self.dirs["memory"]
            swap = directory / "memory.memsw.limit_in_bytes"
            raising = self.memory_limit_mb is not None and memory_mb > self.memory_limit_mb
            # memsw (memory + swap) may never be below the memory limit: order the two writes.
            if raising and swap.exists():
                _write(swap, value)
            _write(directory / "memory.limit_in_bytes", value)
            if not raising and swap.exists():
                _write(swap, value)
        self.memory_limit_mb = memory_mb

    # -- membership -----------------------------------------------------------------------------

    def join_fds(self) -> list[int]:
        """Open cgroup.procs files; the child writes "0" to each (itself) before exec, then they close."""
        return [os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for path in self.dirs.values()]

    @staticmethod
    def join(fds: list[int]) -> None:
        """In the child between fork and exec: move this process into the group."""
        for fd in fds:
            os.write(fd, b"0")

    def pids(self) -> list[int]:
        path = next(iter(self.dirs.values())) / "cgroup.procs"
        try:
            return [int(line) for line in path.read_text().split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        """How many processes of the group the kernel killed for memory."""
        try:
            if self.version == 2:
                text = (self.dirs[""] / "memory.events").read_text()
            else:
                text = (self.dirs["memory"] / "memory.oom_control").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_memory_mb(self) -> float | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.dirs.get("") or self.dirs["memory"]).joinpath(name).read_text()) / MB
        except (OSError, ValueError, KeyError):
            return None

    def kill(self, rounds: int = 100) -> bool:
        """SIGKILL every process of the group; True once it is empty."""
        if self.version == 2:
            try:
                _write(self.dirs[""] / "cgroup.kill", "1")
            except OSError:
                pass
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.002)
        return not self.pids()

    def remove(self) -> None:
        """Kill what is left and remove the group's directories (tries a little while zombies are reaped)."""
        self.kill()
        for path in self.dirs.values():
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
        self.dirs = {}
