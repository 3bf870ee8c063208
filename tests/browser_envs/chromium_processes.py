"""Which Chromium processes of sandbox uids are alive (no Django: the bench imports it too)."""
import os

from runs.sandbox.process import UID_BASE, UID_COUNT


def sandbox_chromium_pids(*, mine_only: bool = False) -> list[int]:
    """Live Chromium (and Playwright driver) processes whose real uid is a sandbox uid. `mine_only`: just
    those this process started (its descendants) and orphans adopted by init, not another test process's
    (pytest-xdist runs several beside each other)."""
    found, parents = [], {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                text = status.read(2048).decode("ascii", "replace")
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                command = cmdline.read(4096)
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        parents[int(entry.name)] = int(fields.get("PPid", "0").strip() or 0)
        uid = int(fields.get("Uid", "0").split()[0])
        state = fields.get("State", "").split()[:1]
        if not (UID_BASE <= uid < UID_BASE + UID_COUNT) or state in (["Z"], ["X"]):
            continue
        if b"chrom" in command or b"playwright" in command:
            found.append(int(entry.name))
    if not mine_only:
        return found
    return [pid for pid in found if _descends_from(pid, os.getpid(), parents) or parents.get(pid) == 1]


def _descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = set()
    while pid and pid not in seen:
        if pid == ancestor:
            return True
        seen.add(pid)
        pid = parents.get(pid, 0)
    return False
