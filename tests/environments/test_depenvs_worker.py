"""A real Celery worker builds what a commit queues: a failing set ends `failed` with uv's reason and
the same worker goes on to build the next set; runs of the built version are then accepted."""

import pytest

from environments.models import DependencyEnvironment, DependencyStatus
from runs import services as run_services
from tests.environments.depenv_support import (  # noqa: F401 - fixtures
    commit, deps, depenv_root, package_files, plugin_wheels,
)
from tests.processes import celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import scripted_agent

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def status_of(version):
    return DependencyEnvironment.objects.get(pk=version.dependency_environment_id).status


def test_commits_queue_builds_that_the_worker_runs_one_after_another(deps, team, owner, celery_worker):
    failing = commit(team, owner, "unknown-dep", package_files(
        entrypoint="gymnasium:CartPole-v1", dependencies=["studio-surely-no-such-package==1.0"]))
    good = commit(team, owner, "counter", package_files(
        entrypoint="gymnasium:studio_counter_plugin:StudioCounter-v0", dependencies=["studio-counter-plugin==1.0.0"]))

    wait_for(lambda: status_of(failing) == DependencyStatus.FAILED, 120, "the failing build to end")
    assert "not found in the package registry" in DependencyEnvironment.objects.get(pk=failing.dependency_environment_id).error
    wait_for(lambda: status_of(good) == DependencyStatus.READY, 180, "the good build to end")
    wait_for(lambda: DependencyEnvironment.objects.get(pk=good.dependency_environment_id).entrypoint_checks, 60,
             "the entrypoint check")
    good.refresh_from_db()
    run = run_services.run_create(team=team, actor=owner, version=good, agent=scripted_agent(team, owner, "def act(o, i):\n    return 1\n"),
                                  seeds=[0], enqueue=False)
    assert run.rollouts.count() == 2
