"""Fair shares between teams: with a per-team cap on running rollouts, one team's hung rollouts never
hold every worker slot, and another team's run finishes on time beside them."""
import time

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


def test_one_teams_hung_rollouts_do_not_block_another_teams_run(team, owner, other_team, outsider, monkeypatch, celery_queue, request):
    monkeypatch.setenv("TEAM_MAX_RUNNING_ROLLOUTS", "1")  # the worker (2 slots) gives a team at most one
    hung_version = package_version(team, owner, "hangs", ENV_PY.format(sleep=25), limits={"step_timeout_s": 60})
    quick_version = package_version(other_team, outsider, "quick", ENV_PY.format(sleep=0))
    hung = services.run_create(team=team, actor=owner, version=hung_version, agent=random_agent(team, owner), seeds=[0, 1, 2])
    quick = services.run_create(team=other_team, actor=outsider, version=quick_version,
                                agent=random_agent(other_team, outsider), seeds=[0, 1, 2])
    request.getfixturevalue("celery_worker")
    started = time.monotonic()
    peak_hung_running = 0

    def quick_done():
        nonlocal peak_hung_running
        peak_hung_running = max(peak_hung_running, hung.rollouts.filter(status=RolloutStatus.RUNNING).count())
        return not quick.rollouts.exclude(status=RolloutStatus.SUCCEEDED).exists()

    try:
        wait_for(quick_done, 45, "the other team's run to finish beside the hung rollouts")
    finally:
        print("hung:", list(hung.rollouts.values_list("status", flat=True)), "quick:", list(quick.rollouts.values_list("status", "error")))
    # Without the cap both worker slots hold hung rollouts for their 25 s: the quick run could only
    # start once they had finished. With it, the quick run is done while the first hung one still runs.
    assert not hung.rollouts.filter(status=RolloutStatus.SUCCEEDED).exists()
    assert time.monotonic() - started < 45
    assert peak_hung_running <= 1
    assert hung.rollouts.filter(status=RolloutStatus.QUEUED).count() >= 1  # still waiting its turn
    services.run_cancel(run=hung, actor=owner)
