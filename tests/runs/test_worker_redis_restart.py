"""A Redis restart (killed, empty, back seconds later) heals by itself: the worker stays up, reconnects,
and every rollout queued or running through the outage ends once, finished, with its run."""
import time

import pytest

from runs import services
from runs.models import Rollout, Run
from runs.tasks import execute_rollout
from studio.celery import app
from tests.processes import celery_queue, kill_group, private_redis, start_celery_worker, wait_for  # noqa: F401 - fixtures

from rollout_factories import package_version

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SLOW_ENV = """
import time

class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        self.n = 0
        return 0

    def step(self, action):
        time.sleep(0.25)
        self.n += 1
        return self.n, 0.0, self.n >= 12, False, {}

    def verify(self):
        return 1.0, "counted"
"""


def test_a_redis_restart_leaves_the_worker_running_and_every_rollout_finishes(private_redis, celery_queue, tmp_path, team, owner):
    url = private_redis.url
    version = package_version(team, owner, "slow-through-restart", SLOW_ENV)
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=list(range(6)), enqueue=False)
    log = tmp_path / "worker.log"
    worker = start_celery_worker(log, queue=celery_queue, loglevel="info", env={
        "REDIS_URL": url, "CELERY_BROKER_URL": url, "ROLLOUT_STALE_AFTER_S": "5", "ROLLOUT_LOST_GRACE_S": "1",
    })
    try:
        with app.connection_for_write(url) as connection:
            for rollout in run.rollouts.all():
                execute_rollout.apply_async((rollout.pk,), connection=connection)
        wait_for(lambda: run.rollouts.filter(status="running", step_count__gte=1).exists(), 60, "a rollout to run")

        # Killed: the queued rollouts' messages and the unacked ones go with it (no persistence).
        private_redis.kill()
        time.sleep(6)
        assert worker.poll() is None, log.read_text()[-3000:]
        private_redis.start()

        wait_for(lambda: Run.objects.get(pk=run.pk).status == "finished", 120, "the run to finish after the restart")
        assert worker.poll() is None, log.read_text()[-3000:]
        rollouts = list(Rollout.objects.filter(run=run))
        assert [r.status for r in rollouts] == ["succeeded"] * 6, [(r.status, r.error) for r in rollouts]
        # Each ran to its end once (a rollout restarted by a redelivery starts again at step 0).
        assert all(r.step_count == 12 for r in rollouts)
    finally:
        kill_group(worker)
