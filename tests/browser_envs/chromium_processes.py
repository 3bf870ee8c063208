"""Which Chromium processes of sandbox uids are alive (no Django: the bench imports it too)."""
import os

from runs.sandbox.process import UID_BASE, UID_COUNT


def sandbox_chromium_pids() -> list[int]:
    """Live Chromium (and Playwright driver) processes whose real uid is a sandbox uid."""
    found = []
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
        uid = int(fields.get("Uid", "0").split()[0])
        state = fields.get("State", "").split()[:1]
        if not (UID_BASE <= uid < UID_BASE + UID_COUNT) or state in (["Z"], ["X"]):
            continue
        if b"chrom" in command or b"playwright" in command:
            found.append(int(entry.name))
    return found
