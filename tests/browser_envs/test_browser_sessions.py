"""Remote sessions of browser environments: the same episode service as workers and play, so Chromium,
screenshots and the verifier work through the sessions API too."""
import pytest

from runs.models import Rollout, Step
from tests.browser_envs.conftest import browser_version
from tests.conftest import api_for
from tests.processes import episode_host, episode_host_prefix  # noqa: F401 - fixtures
from tests.runs.rollout_factories import DEMO_DIR, read_folder

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("episode_host")]


def test_a_remote_session_drives_a_browser_environment_with_screenshots(team, owner):
    version = browser_version(team, owner, "web_form", read_folder(DEMO_DIR / "web_form"))
    api = api_for(owner, team)
    opened = api.post("/sessions", {"version": version.label, "task_id": "basic", "seed": 0})
    assert opened.status_code == 201, opened.content
    sid = opened.json()["session_id"]
    assert "input[text] name=name" in opened.json()["observation"]["text"]

    for action in ({"action": "fill", "selector": "input[name=name]", "value": "Ada Lovelace"},
                   {"action": "fill", "selector": "input[name=email]", "value": "ada@example.org"},
                   {"action": "click", "selector": "button[type=submit]"}):
        step = api.post(f"/sessions/{sid}/step", {"action": action})
        assert step.status_code == 200, step.content
    assert step.json()["observation"]["title"] == "Welcome"
    api.post(f"/sessions/{sid}/step", {"action": {"action": "done", "answer": "signed up"}})
    closed = api.post(f"/sessions/{sid}/close").json()
    assert closed["status"] == "succeeded" and closed["verifier_reward"] == 1.0 and closed["step_count"] == 4
    steps = Step.objects.filter(rollout_id=closed["rollout_id"]).order_by("index")
    assert [s.index for s in steps] == [0, 1, 2, 3] and all(s.artifact for s in steps)
    assert Rollout.objects.get(pk=closed["rollout_id"]).reproduction["sandbox"]["backend"] == "process"
