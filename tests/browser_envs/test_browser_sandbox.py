"""The browser sandbox itself: Chromium under a sandbox uid, in an empty network namespace whose
loopback is up, with RLIMIT_DATA instead of RLIMIT_AS; and the demo packages as seed_demo loads them."""
import base64

import pytest
from django.core.management import call_command

from environments.demo import DEMO_DIR, read_folder
from environments.models import Environment
from environments.package import parse_tasks, validate_package
from runs.sandbox import ProcessSandbox, SandboxLimits
from runs.sandbox.process import BROWSER_CONFIG


def test_browser_limits_keep_the_rest_and_make_room_for_chromium():
    limits = SandboxLimits(step_timeout_s=3, memory_mb=256).for_browser()
    assert (limits.browser, limits.step_timeout_s, limits.nproc >= 512, limits.memory_mb) == (True, 3, True, 1024)
    assert limits.for_runner()["browser"] is True
    assert "browser" not in SandboxLimits().for_runner()


@pytest.mark.browser
def test_chromium_serves_and_renders_the_site_inside_the_sandbox():
    sandbox = ProcessSandbox(BROWSER_CONFIG)
    try:
        facts = sandbox.start(read_folder(DEMO_DIR / "web_form"), mode="env", entrypoint="env:SignupForm",
                              limits=SandboxLimits(step_timeout_s=20).for_browser())
        assert facts["network_isolated"] is True and facts["uid_switched"] is True
        assert facts["limits"]["applied"]["browser"] is True
        observation = sandbox.reset({"id": "basic", "prompt": "Sign up"}, 0)
        assert observation["title"] == "Sign up" and observation["url"] == "/"
        assert observation["task"] == "Sign up"
        image = base64.b64decode(sandbox.last_artifact["base64"])
        assert image[:3] == b"\xff\xd8\xff" and len(image) <= 200_000
        # The runner's data-segment cap, read back from the sandbox's own process.
        with open(f"/proc/{sandbox.pid}/limits") as limits:
            text = limits.read()
        assert "Max data size             1073741824" in text
        assert "Max address space         unlimited" in text
        step = sandbox.step({"action": "click", "id": 999})
        assert "no element matches" in step.observation["error"]
        step = sandbox.step({"action": "teleport"})
        assert "unknown action" in step.info["action_error"]
    finally:
        sandbox.close()


@pytest.mark.parametrize("name", ["web_form", "web_shop"])
def test_browser_demo_packages_validate_with_growing_difficulty(name):
    files = read_folder(DEMO_DIR / name)
    assert validate_package(files) == []
    assert {"agent.py", "agent_gaming.py"} <= set(files)
    difficulties = [task["difficulty"] for task in parse_tasks(files)]
    assert difficulties == sorted(difficulties) and len(set(difficulties)) >= 2


@pytest.mark.django_db
def test_seed_demo_loads_the_browser_demos_as_browser_environments():
    call_command("seed_demo", "--no-runs", stdout=open("/dev/null", "w"))
    kinds = dict(Environment.objects.filter(team__slug="demo").values_list("slug", "kind"))
    assert kinds["web-form"] == kinds["web-shop"] == "browser"
