"""Browser environments through the real engine: Chromium runs inside the process sandbox.

Every test here checks afterwards that no Chromium process of a sandbox uid is left behind.
"""
import time

import pytest

from environments import services as env_services
from tests.browser_envs.chromium_processes import sandbox_chromium_pids


def browser_version(team, actor, slug, files):
    """A version of a browser package (files dict) in `team`."""
    env = env_services.environment_create(
        team=team, actor=actor, name=slug, slug=slug.replace("_", "-"), kind="browser", files=files
    )
    return env_services.version_commit(environment=env, actor=actor, message="test", files=files)


@pytest.fixture(autouse=True)
def no_chromium_left_behind():
    yield
    from runs.episodes import close_browser_pool

    close_browser_pool()  # the idle pooled browser is meant to outlive a rollout, not the test
    deadline = time.monotonic() + 5.0
    while sandbox_chromium_pids(mine_only=True) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_chromium_pids(mine_only=True) == [], "a Chromium process of a sandbox uid outlived its rollout"


@pytest.fixture(autouse=True)
def media_in_tmp(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"
