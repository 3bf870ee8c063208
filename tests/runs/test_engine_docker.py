"""With SANDBOX_BACKEND=docker the whole rollout path runs its env and agent in containers."""
import pytest
from django.test import override_settings

from runs import services
from runs.models import Rollout
from runs.tasks import execute_rollout
from tests.runs.rollout_factories import demo_agent_code, demo_version

pytestmark = pytest.mark.docker


@pytest.fixture
def docker_ready():
    from runs.sandbox import docker_image
    from runs.sandbox.docker import DOCKER, sandbox_image

    ok, why = docker_image.docker_engine_status(DOCKER)
    if not ok:
        pytest.skip(f"no Docker engine: {why}")
    try:
        sandbox_image(DOCKER)
    except docker_image.ImageBuildError as exc:
        pytest.skip(f"no Docker engine: the sandbox image could not be built: {exc}")


@override_settings(SANDBOX_BACKEND="docker")
def test_scripted_rollout_through_docker_backend_succeeds(docker_ready, team, owner):
    version = demo_version(team, owner, "guess_number")
    agent = services.agent_create(team=team, actor=owner, name="bisect", kind="scripted", code=demo_agent_code("guess_number"))
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=["t1"], seeds=[3], enqueue=False)
    rollout = run.rollouts.get()
    execute_rollout(rollout.pk)
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert rollout.status == "succeeded", rollout.error
    assert rollout.verifier_reward == 1.0
    sandbox = rollout.reproduction["sandbox"]
    assert sandbox["backend"] == "docker" and sandbox["network_isolated"] is True
