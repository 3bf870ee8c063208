"""Review fixtures: runs whose rollouts, steps and verifier proposals are written straight to the
database (bulk), so queue, agreement and export tests need no sandbox."""
import pytest

from runs.models import LabelDecision, LabelSource, RewardLabel, Rollout, RolloutStatus, Run, Step
from runs.services import agent_get_or_create
from tests.runs.rollout_factories import package_version

ENV_PY = """
from studio_sdk import Environment

class Env(Environment):
    def reset(self, task, seed):
        return {"n": 0}

    def step(self, action):
        return {"n": 1}, 1.0, True, False, {}
"""


def bulk_run(team, actor, version, *, rewards, steps=2, reviews_required=1, agent_name="random", tool_calls=False,
             purpose="evaluation"):
    """A finished run with one rollout per reward (the verifier's proposal), each with `steps` steps."""
    agent = agent_get_or_create(team=team, actor=actor, name=agent_name, kind="random")
    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t1"], seeds=[0],
                             reviews_required=reviews_required, status="finished", created_by=actor, purpose=purpose)
    rollouts = Rollout.objects.bulk_create(
        Rollout(team=team, run=run, task_id="t1", seed=i, step_count=steps, verifier_reward=reward,
                verifier_reason=f"reward {reward}", total_reward=reward, initial_observation={"question": f"q{i}"},
                status=RolloutStatus.SUCCEEDED if reward > 0 else RolloutStatus.FAILED, end_reason="terminated")
        for i, reward in enumerate(rewards)
    )
    Step.objects.bulk_create(
        Step(rollout=r, index=i,
             action={"tool": "lookup_item", "arguments": {"name": f"item {i}"}} if tool_calls else i,
             observation={"n": i, "text": "é ✓"}, reward=0.5, terminated=i == steps - 1, info={"i": i})
        for r in rollouts for i in range(steps)
    )
    RewardLabel.objects.bulk_create(
        RewardLabel(team=team, rollout=r, source=LabelSource.VERIFIER, value=r.verifier_reward,
                    decision=LabelDecision.PROPOSED, rationale=r.verifier_reason)
        for r in rollouts
    )
    return run


@pytest.fixture
def version(team, owner):
    return package_version(team, owner, "counter-review", ENV_PY)


@pytest.fixture
def make_run(team, owner, version):
    def make(rewards=(1.0, 0.0, 1.0), **kw):
        return bulk_run(team, owner, kw.pop("version", version), rewards=list(rewards), **kw)

    return make


@pytest.fixture
def second_reviewer(team):
    from studio.models import Membership, Role
    from tests.conftest import make_user

    user = make_user("rosa")
    Membership.objects.create(team=team, user=user, role=Role.REVIEWER)
    return user
