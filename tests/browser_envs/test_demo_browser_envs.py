"""The two demo browser environments, played by their scripted agents through the real engine."""
import pytest

from runs import services
from runs.models import Step
from tests.browser_envs.conftest import browser_version
from tests.runs.rollout_factories import DEMO_DIR, play_run, read_folder, scripted_agent

pytestmark = [pytest.mark.browser, pytest.mark.django_db]


def play_tasks(team, owner, demo, agent_file, task_ids=None):
    version = browser_version(team, owner, demo, read_folder(DEMO_DIR / demo))
    agent = scripted_agent(team, owner, (DEMO_DIR / demo / agent_file).read_text(), name=f"{demo}-{agent_file}")
    run = services.run_create(team=team, actor=owner, version=version, agent=agent,
                              task_ids=task_ids or [task["id"] for task in version.tasks], seeds=[0])
    return {rollout.task_id: rollout for rollout in play_run(run)}


@pytest.mark.parametrize("demo", ["web_form", "web_shop"])
def test_scripted_agent_solves_every_task_and_each_step_has_a_stored_screenshot(team, owner, demo, media_in_tmp):
    rollouts = play_tasks(team, owner, demo, "agent.py")
    for task_id, rollout in rollouts.items():
        assert (rollout.status, rollout.verifier_reward) == ("succeeded", 1.0), (task_id, rollout.error, rollout.verifier_reason)
    steps = list(Step.objects.filter(rollout__in=rollouts.values()))
    assert steps and all(step.artifact for step in steps)
    for step in steps:
        assert "base64" not in str(step.observation)  # the image is a file, not part of the row
        assert (media_in_tmp / step.artifact.name).read_bytes()[:3] == b"\xff\xd8\xff"  # a JPEG
        assert step.artifact.size <= 200_000
    first = min(steps, key=lambda step: (step.rollout_id, step.index))
    assert set(first.observation) >= {"url", "title", "text", "error"}


@pytest.mark.parametrize("demo, task_ids", [("web_form", ["basic", "confirm"]), ("web_shop", ["one-mug", "desk-price"])])
def test_gaming_agent_that_types_the_success_text_gets_no_reward(team, owner, demo, task_ids):
    rollouts = play_tasks(team, owner, demo, "agent_gaming.py", task_ids)
    for task_id, rollout in rollouts.items():
        assert rollout.status == "failed", (task_id, rollout.status, rollout.error)
        assert rollout.verifier_reward == 0.0
    # It did claim success: the claim is in the answer, the verifier read the server's state instead.
    assert any("done" == (step.action or {}).get("action") for r in rollouts.values() for step in r.steps.all())
