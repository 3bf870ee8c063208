"""Discrete actions by name wherever people read them (runs/action_names.py): the rollout page's step
table shows "UP (2)" as the replay does, and the space a client or the play page is shown names the
actions as the version renames them ([actions] names), with type, n and start as they were."""
import pytest

from runs.action_names import named_space
from runs.models import Agent, Rollout, RolloutStatus, Run, Step
from studio_client.spaces import space_from_description
from tests.conftest import login
from tests.review.conftest import ENV_PY
from tests.runs.rollout_factories import package_version

RAW = {"type": "discrete", "n": 4, "names": ["NOOP", "FIRE", "RIGHT", "LEFT"]}
MANIFEST = {"actions": {"names": ["NOOP", "FIRE", "UP", "DOWN"]}}


def test_the_named_space_carries_the_renamed_names_and_reads_the_same():
    named = named_space(manifest=MANIFEST, action_space=RAW)
    assert named == {"type": "discrete", "n": 4, "names": ["NOOP", "FIRE", "UP", "DOWN"]}
    assert RAW["names"][2] == "RIGHT"  # the episode's own description is left alone
    assert space_from_description(named) == space_from_description(RAW)  # what studio_client builds
    started = named_space(manifest=None, action_space={"type": "discrete", "n": 2, "start": 1, "names": ["a", "b"]})
    assert started["names"] == ["a", "b"] and started["start"] == 1
    box = {"type": "box", "shape": [2], "low": 0, "high": 1}
    assert named_space(manifest=MANIFEST, action_space=box) == box
    assert named_space(manifest=None, action_space={"type": "discrete", "n": 3}) == {"type": "discrete", "n": 3}


@pytest.mark.django_db
def test_the_rollout_pages_step_table_names_each_action(team, owner):
    version = package_version(team, owner, "named-table", ENV_PY)
    agent = Agent.objects.create(team=team, name="random", kind="random")
    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t1"], seeds=[0])
    rollout = Rollout.objects.create(team=team, run=run, task_id="t1", seed=0, status=RolloutStatus.SUCCEEDED,
                                     reproduction={"action_names": {"0": "NOOP", "1": "FIRE", "2": "UP", "3": "DOWN"}})
    Step.objects.bulk_create([Step(rollout=rollout, index=0, action=2, observation=0),
                              Step(rollout=rollout, index=1, action=3, observation=0),
                              Step(rollout=rollout, index=2, action=7, observation=0),  # no name: its number
                              Step(rollout=rollout, index=3, action={"tool": "x"}, observation=0)])
    page = login(owner).get(f"/t/{team.slug}/rollouts/{rollout.pk}/").content.decode()
    table = page[page.index('<div id="steps">'):]
    cells = [row.split("<code>", 1)[1].split("</code>", 1)[0] for row in table.split("<tr><td>")[1:]]
    assert cells == ["UP (2)", "DOWN (3)", "7", '{&quot;tool&quot;: &quot;x&quot;}']
