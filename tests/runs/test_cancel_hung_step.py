"""Cancelling a run whose environment step hangs ends the sandbox's whole process tree and the rollout
(cancelled) at once, not when the step's time limit runs out, and the worker slot runs the next rollout."""
import os
import uuid

import pytest

from runs import services
from runs.models import RolloutStatus
from tests.processes import celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version, random_agent

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HANGING_ENV = """
import os, sys, time

class Env:
    action_space = {{"type": "discrete", "n": 2}}

    def reset(self, task, seed):
        return 0

    def step(self, action):
        if {hang} and os.fork() == 0:  # a child of its own: the whole tree must go
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(1000)", "{marker}"])
        time.sleep(1000 if {hang} else 0)
        return 1, 1.0, True, False, {{}}

    def verify(self):
        return 1.0, "done"
"""


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                    if marker.encode() in cmdline.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_cancelling_a_run_ends_a_hung_step_and_frees_the_worker_slot(team, owner, celery_worker):
    marker = f"hung-step-{uuid.uuid4().hex}"
    hung_version = package_version(team, owner, "hangs", HANGING_ENV.format(hang=True, marker=marker),
                                   limits={"step_timeout_s": 600, "episode_timeout_s": 600})
    agent = random_agent(team, owner)
    hung = services.run_create(team=team, actor=owner, version=hung_version, agent=agent, seeds=[0])
    rollout = hung.rollouts.get()
    wait_for(lambda: processes_with(marker), 60, "the step to hang in its sandbox")
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.RUNNING

    services.run_cancel(run=hung, actor=owner)
    # The step would hang for 600 s (its limit): the cancel ends it within the worker's watch period.
    wait_for(lambda: hung.rollouts.filter(status=RolloutStatus.CANCELLED).exists(), 5, "the hung rollout to be cancelled")
    rollout.refresh_from_db()
    assert rollout.end_reason == "cancelled" and "cancelled" in rollout.error
    assert processes_with(marker) == []  # the forked child died with the sandbox

    quick_version = package_version(team, owner, "quick", HANGING_ENV.format(hang=False, marker=marker))
    quick = services.run_create(team=team, actor=owner, version=quick_version, agent=agent, seeds=[0, 1])
    wait_for(lambda: not quick.rollouts.exclude(status=RolloutStatus.SUCCEEDED).exists(), 60, "the next run to finish")
