"""Rollouts through a real Celery worker process: completion, SIGKILL mid-rollout, and cancel.

Each test starts its own worker on a queue of its own, against the pytest-django test database, and
kills it in a finally. The broker's visibility timeout is left alone: the "unacked" index is shared
by every queue of the Redis database, so a low timeout here would redeliver other workers' messages.
Recovery after a killed worker comes from reject-on-worker-lost (pool child killed) and from
recover_stale_rollouts on worker start (whole worker killed).
"""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from runs import services
from runs.episodes import worker
from runs.models import RolloutStatus, Run, RunStatus
from studio.celery import app
from tests.processes import database_url, forget_queue, kill_group, wait_for

from rollout_factories import demo_agent_code, demo_version, package_version, random_agent, scripted_agent

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
CELERY = REPO / ".venv" / "bin" / "celery"

SLOW_ENV = """
import time

class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        self.n = 0
        self.goal = task.get("goal", 15)
        return 0

    def step(self, action):
        time.sleep(task_sleep)
        self.n += 1
        return self.n, 1.0, self.n >= self.goal, False, {}

    def verify(self):
        return (1.0 if self.n >= self.goal else 0.0), f"reached {self.n}"

task_sleep = 0.2
"""


@pytest.fixture
def queue():
    """A queue of this test's own; the test process sends to it, its workers consume it."""
    name = f"test-rollouts-{uuid.uuid4().hex[:10]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = name
    yield name
    app.conf.task_default_queue = previous
    forget_queue(name)


@pytest.fixture
def workers(queue, tmp_path):
    """start() -> a running worker process on the test queue; every one is SIGKILLed at the end."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        env = os.environ | {
            "DATABASE_URL": database_url(),
            "CELERY_QUEUE": queue,
            "DJANGO_SETTINGS_MODULE": "studio.settings",
            "LOG_LEVEL": "WARNING",
        }
        proc = subprocess.Popen(
            [str(CELERY), "-A", "studio", "worker", "-Q", queue, "-c", "1", "--pool", "prefork",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning",
             "-n", f"{queue}-{len(started)}@%h"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, start_new_session=True,
            stderr=open(tmp_path / f"worker-{len(started)}.log", "wb"),
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_group(proc)
    for log in sorted(tmp_path.glob("worker-*.log")):
        text = log.read_text(errors="replace")
        if "Traceback" in text:
            print(f"--- {log.name}\n{text[-4000:]}", file=sys.stderr)




def rollout_state(run):
    return list(run.rollouts.order_by("id").values("id", "status", "step_count", "attempts", "worker", "error"))


def assert_clean_steps(rollout):
    indexes = list(rollout.steps.order_by("index").values_list("index", flat=True))
    assert indexes == list(range(len(indexes))) == list(range(rollout.step_count))


def test_a_worker_runs_a_small_run_to_completion(team, owner, workers):
    version = demo_version(team, owner, "guess_number")
    agent = scripted_agent(team, owner, demo_agent_code("guess_number"))
    workers()
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=["t1", "t3"], seeds=[0, 1])
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.FINISHED, 40, f"run to finish: {rollout_state(run)}")
    for rollout in run.rollouts.all():
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.attempts == 1 and rollout.labels.count() == 1
        assert_clean_steps(rollout)


def _slow_version(team, owner, slug, goal=15):
    return package_version(team, owner, slug, SLOW_ENV, tasks=[{"id": "t1", "difficulty": 1, "goal": goal}],
                           max_steps=200, limits={"step_timeout_s": 5, "episode_timeout_s": 120})


def test_sigkilled_pool_child_restarts_the_rollout_without_duplicate_steps(team, owner, workers):
    version = _slow_version(team, owner, "slow-child")
    workers()
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0])
    rollout = run.rollouts.get()
    wait_for(lambda: run.rollouts.filter(status=RolloutStatus.RUNNING, step_count__gte=3).exists(), 30,
             f"rollout to be running with steps: {rollout_state(run)}")
    rollout.refresh_from_db()
    child_pid = int(rollout.worker.split(":")[1])
    os.kill(child_pid, signal.SIGKILL)

    wait_for(lambda: run.rollouts.get().is_finished, 40, f"rollout to finish after the kill: {rollout_state(run)}")
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.attempts == 2 and rollout.step_count == 15
    assert_clean_steps(rollout)


def test_sigkilled_worker_is_recovered_by_the_next_worker(team, owner, workers):
    version = _slow_version(team, owner, "slow-worker", goal=12)
    first = workers()
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0])
    wait_for(lambda: run.rollouts.filter(status=RolloutStatus.RUNNING, step_count__gte=3).exists(), 30,
             f"rollout to be running with steps: {rollout_state(run)}")
    kill_group(first)
    assert run.rollouts.get().status == RolloutStatus.RUNNING  # stuck until someone recovers it

    workers()
    wait_for(lambda: run.rollouts.get().is_finished, 40, f"rollout to finish on the new worker: {rollout_state(run)}")
    rollout = run.rollouts.get()
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.attempts == 2 and rollout.step_count == 12
    assert_clean_steps(rollout)


def test_cancel_stops_the_running_rollout_quickly_and_queued_ones_never_start(team, owner, workers):
    version = _slow_version(team, owner, "slow-cancel", goal=150)
    workers()
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1, 2])
    wait_for(lambda: run.rollouts.filter(status=RolloutStatus.RUNNING, step_count__gte=2).exists(), 30,
             f"first rollout to be running: {rollout_state(run)}")
    services.run_cancel(run=run, actor=owner)
    cancelled_at = time.monotonic()
    wait_for(lambda: all(r.is_finished for r in run.rollouts.all()), 10, f"rollouts to stop: {rollout_state(run)}")
    assert time.monotonic() - cancelled_at < 2.5

    running, *queued = run.rollouts.order_by("id")
    assert running.status == RolloutStatus.CANCELLED and running.step_count >= 2
    assert_clean_steps(running)
    for rollout in queued:
        assert rollout.status == RolloutStatus.CANCELLED and rollout.attempts == 0 and rollout.step_count == 0
    time.sleep(1)  # the worker consumes the queued messages and must leave them cancelled
    assert set(run.rollouts.values_list("status", flat=True)) == {RolloutStatus.CANCELLED}
    assert [r.attempts for r in run.rollouts.order_by("id")][1:] == [0, 0]
