"""Fair shares between teams: with the default per-team cap on running rollouts (a worker's concurrency
minus one), one team's hung rollouts never hold every worker slot, and another team's run finishes
beside them; the capped team's backlog waits parked, not circling through the broker."""
import pytest

from runs import services
from runs.models import RolloutStatus
from tests.processes import celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version, random_agent

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ENV_PY = """
import time

class Env:
    action_space = {{"type": "discrete", "n": 2}}

    def reset(self, task, seed):
        return 0

    def step(self, action):
        time.sleep({sleep})
        return 1, 1.0, True, False, {{}}

    def verify(self):
        return 1.0, "done"
"""


def test_one_teams_hung_rollouts_do_not_block_another_teams_run(team, owner, other_team, outsider, celery_queue, request):
    # Default settings: TEAM_MAX_RUNNING_ROLLOUTS is "auto", so the worker (2 slots) gives a team one.
    hung_version = package_version(team, owner, "hangs", ENV_PY.format(sleep=1000),
                                   limits={"step_timeout_s": 600, "episode_timeout_s": 600})
    quick_version = package_version(other_team, outsider, "quick", ENV_PY.format(sleep=0))
    hung = services.run_create(team=team, actor=owner, version=hung_version, agent=random_agent(team, owner), seeds=[0, 1, 2])
    quick = services.run_create(team=other_team, actor=outsider, version=quick_version,
                                agent=random_agent(other_team, outsider), seeds=[0, 1, 2])
    request.getfixturevalue("celery_worker")  # the hung run's messages are first in the queue
    peak_hung_running = 0

    def quick_done():
        nonlocal peak_hung_running
        peak_hung_running = max(peak_hung_running, hung.rollouts.filter(status=RolloutStatus.RUNNING).count())
        return not quick.rollouts.exclude(status=RolloutStatus.SUCCEEDED).exists()

    # Without the cap both worker slots hold hung rollouts (for 600 s): the quick run could not start.
    wait_for(quick_done, 60, "the other team's run to finish beside the hung rollouts")
    assert peak_hung_running <= 1
    # The quick team is capped too: each of its rollouts waited parked until the one before it ended.
    assert sorted(quick.rollouts.values_list("attempts", flat=True)) == [1, 1, 1]
    assert not quick.rollouts.filter(parked=True).exists()
    wait_for(lambda: quick.__class__.objects.get(pk=quick.pk).status == "finished", 10, "the quick run to finish")
    assert hung.rollouts.filter(status=RolloutStatus.RUNNING).count() == 1
    waiting = hung.rollouts.filter(status=RolloutStatus.QUEUED)
    assert waiting.count() == 2 and all(waiting.values_list("parked", flat=True))  # parked: no message circling

    services.run_cancel(run=hung, actor=owner)  # the hung step is killed at once
    wait_for(lambda: not hung.rollouts.exclude(status=RolloutStatus.CANCELLED).exists(), 10, "the hung run to be cancelled")

