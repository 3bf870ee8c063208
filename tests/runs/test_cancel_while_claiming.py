"""The claim path is free of deadlocks under cancel: workers claim a run's rollouts while it is
cancelled, many times over, and every rollout ends claimed or cancelled, none left queued."""
import threading

import pytest
from django.db import connection

from runs import services
from runs.episodes import worker
from runs.models import Rollout, RolloutStatus, RunStatus
from tests.runs.rollout_factories import package_version, random_agent

pytestmark = pytest.mark.django_db(transaction=True)

ENV_PY = """
class Env:
    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 0.0, True, False, {}
"""


def test_cancelling_runs_while_workers_claim_their_rollouts_never_deadlocks(team, owner):
    version = package_version(team, owner, "claims", ENV_PY)
    agent = random_agent(team, owner)
    runs = [
        services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=list(range(30)), enqueue=False)
        for _ in range(6)
    ]
    errors: list[BaseException] = []

    def guarded(work):
        def body():
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)
            finally:
                connection.close()

        return body

    def claim_all(run, reverse):
        ids = list(run.rollouts.order_by("-id" if reverse else "id").values_list("id", flat=True))
        for rollout_id in ids:
            worker.rollout_claim(rollout_id)  # the claim alone: no episode is played

    for run in runs:
        started = threading.Barrier(3)

        def claimer(reverse, run=run, started=started):
            started.wait()
            claim_all(run, reverse)

        def canceller(run=run, started=started):
            started.wait()
            services.run_cancel(run=run, actor=owner)

        threads = [threading.Thread(target=guarded(work)) for work in (lambda: claimer(False), lambda: claimer(True), canceller)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads), "a claim or a cancel hung"

    assert not errors, errors
    for run in runs:
        run.refresh_from_db()
        assert run.status == RunStatus.CANCELLED
        statuses = set(Rollout.objects.filter(run=run).values_list("status", flat=True))
        assert statuses <= {RolloutStatus.RUNNING, RolloutStatus.CANCELLED}, statuses
