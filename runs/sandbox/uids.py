"""Sandbox uids: as root each sandbox runs under a uid of its own, a slot from UID_BASE up held
through an flock (so worker processes on one host never share one), and everything of that uid is
SIGKILLed at teardown (setsid escapees included). A dead worker's left-overs are swept when its
slot is taken again."""

import dataclasses
import fcntl
import os
import signal
import time

from .cgroups import SandboxCgroup
from .config import DEFAULT_CONFIG, SandboxConfig
from .errors import SandboxCrashed
from .view import remove_stale_workspaces


class UidSlot:
    """A sandbox uid held through an flock, so worker processes on one host never share one."""

    def __init__(self, uid: int, lock_fd: int | None):
        self.uid = uid
        self.lock_fd = lock_fd

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


_next_slot = [os.getpid() * 17]


def acquire_uid_slot(config: SandboxConfig) -> UidSlot:
    lock_dir = config.root / "slots"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    start = _next_slot[0]
    for offset in range(config.uid_count):
        index = (start + offset) % config.uid_count
        uid = config.uid_base + index
        fd = os.open(lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        # Left-overs of a crashed worker: kill them; zombies still count against RLIMIT_NPROC, skip.
        if kill_uid_processes(uid) > 0:
            os.close(fd)
            continue
        remove_stale_workspaces(config.root, uid)
        SandboxCgroup.remove_stale(f"sb-{uid}-")
        _next_slot[0] = index + 1
        return UidSlot(uid, fd)
    raise SandboxCrashed(f"no free sandbox uid in {config.uid_base}..{config.uid_base + config.uid_count - 1}")


def sweep_stale_sandboxes(config: SandboxConfig = None) -> int:
    """Remove the workspaces and cgroups of sandboxes whose worker died (a worker calls it at start):
    those of uid slots nobody holds now. Returns how many slots were cleaned."""
    config = config or DEFAULT_CONFIG
    uids = set()
    for name in os.listdir(config.root) if config.root.is_dir() else []:
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == "sb" and parts[1].isdigit():
            uids.add(int(parts[1]))
    cleaned = 0
    for uid in sorted(uid for uid in uids if config.uid_base <= uid < config.uid_base + config.uid_count):
        try:
            slot = acquire_uid_slot(dataclasses.replace(config, uid_base=uid, uid_count=1))
        except SandboxCrashed:
            continue  # held by a live sandbox, or its zombies are not reaped yet
        slot.release()  # acquiring it removed what its last holder left
        cleaned += 1
    return cleaned


def uid_processes(uid: int) -> tuple[list[int], int]:
    """(live pids, zombie count) of processes whose real uid is `uid`."""
    live, zombies = [], 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                text = status.read(2048)
        except OSError:
            continue
        state = uid_line = None
        for line in text.split(b"\n"):
            if line.startswith(b"State:"):
                state = line.split()[1]
            elif line.startswith(b"Uid:"):
                uid_line = line
                break
        if uid_line is None or int(uid_line.split()[1]) != uid:
            continue
        if state in (b"Z", b"X"):
            zombies += 1
        else:
            live.append(int(entry.name))
    return live, zombies


def kill_uid_processes(uid: int, rounds: int = 50) -> int:
    """SIGKILL every process of `uid` (escapees of the process group included); returns zombies left."""
    zombies = 0
    for _ in range(rounds):
        live, zombies = uid_processes(uid)
        if not live:
            break
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
    # Zombies of escaped grandchildren belong to init, which reaps them (here within ~2 s); the slot
    # allocator skips a uid until they are gone, since they still count against RLIMIT_NPROC.
    return len(live) + zombies

