"""Browser environments through the real engine: Chromium runs inside the process sandbox.

Every test here checks afterwards that no Chromium process of a sandbox uid is left behind.
"""
import time

import pytest

from environments import services as env_services
from runs.sandbox.process import UID_BASE, UID_COUNT


def browser_version(team, actor, slug, files):
    """A version of a browser package (files dict) in `team`."""
    env = env_services.environment_create(
        team=team, actor=actor, name=slug, slug=slug.replace("_", "-"), kind="browser", files=files
    )
    return env_services.version_commit(environment=env, actor=actor, message="test", files=files)


def sandbox_chromium_pids() -> list[int]:
    """Live Chromium (and Playwright driver) processes whose real uid is a sandbox uid."""
    import os

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


@pytest.fixture(autouse=True)
def no_chromium_left_behind():
    yield
    deadline = time.monotonic() + 5.0
    while sandbox_chromium_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_chromium_pids() == [], "a Chromium process of a sandbox uid outlived its rollout"


@pytest.fixture(autouse=True)
def media_in_tmp(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"
