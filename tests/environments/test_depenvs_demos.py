"""The demo packages with declared dependencies (MiniGrid, MuJoCo) build, pass their entrypoint check,
and their rollouts through the studio are step for step what Gymnasium itself gives for the same seed
and actions, in the same dependency environment. Needs the packages from the index (or uv's cache)."""

import pytest

from environments.dependencies import services as dependency_services
from environments.models import DependencyStatus
from tests.environments.depenv_support import (  # noqa: F401 - fixtures
    bare_trajectory, build, deps, depenv_root, plugin_wheels, stored_plain,
)
from tests.runs.conftest import docker_image_name  # noqa: F401 - fixture: skips without an engine
from tests.runs.rollout_factories import demo_agent_code, demo_version, play_one, random_agent, scripted_agent


# Atari frames are 100 KB each: its rollouts here stop after a few steps (small data, the same code path),
# before anyone scores, so by Pong's [success] rule (a point ahead) they end failed, not succeeded.
ATARI_LIMITS = {"max_steps": 12}
CUT_SHORT = {"atari_pong": "failed"}


@pytest.mark.parametrize(
    ("name", "task_id", "seed", "env_id", "kwargs", "backend", "limits"),
    [
        ("minigrid_empty", "6x6", 3, "minigrid:MiniGrid-Empty-5x5-v0", {"size": 6}, "process", None),
        ("mujoco_pendulum", "balance-noisy-start", 1, "InvertedPendulum-v5", {"reset_noise_scale": 0.1}, "process", None),
        ("atari_pong", "pong-sticky", 4, "ale_py:ALE/Pong-v5", {}, "process", ATARI_LIMITS),
        pytest.param("minigrid_empty", "8x8", 5, "minigrid:MiniGrid-Empty-5x5-v0", {"size": 8}, "docker", None,
                     marks=pytest.mark.docker),
        pytest.param("mujoco_pendulum", "balance", 2, "InvertedPendulum-v5", {}, "docker", None, marks=pytest.mark.docker),
        pytest.param("atari_pong", "pong", 6, "ale_py:ALE/Pong-v5", {"repeat_action_probability": 0.0}, "docker",
                     ATARI_LIMITS, marks=pytest.mark.docker),
    ],
)
def test_demo_with_dependencies_runs_exactly_as_gymnasium(deps, settings, request, team, owner, name, task_id, seed,
                                                          env_id, kwargs, backend, limits):
    if backend == "docker":
        request.getfixturevalue("docker_image_name")  # skips with the reason where no engine answers
    settings.SANDBOX_BACKEND = backend
    version = demo_version(team, owner, name)
    assert build(version) == "ready", version.dependency_environment.error
    assert version.dependency_environment.status == DependencyStatus.READY
    assert dependency_services.version_run_refusal(version) is None
    check = dependency_services.version_dependencies(version)["entrypoint_check"]
    assert check["ok"], check

    agent = scripted_agent(team, owner, demo_agent_code(name), name=f"{name} solver")
    rollout = play_one(team, owner, version, agent, task_id=task_id, seed=seed, limits=limits)
    assert (rollout.status, rollout.error) == (CUT_SHORT.get(name, "succeeded"), ""), rollout.error
    steps = list(rollout.steps.order_by("index").values_list("action", "observation", "reward", "terminated", "truncated"))
    assert steps, "the scripted agent acted"

    site = dependency_services.version_python_path(version)[1]
    bare = bare_trajectory(site, env_id, seed, [action for action, *_ in steps], kwargs)
    if limits:
        bare["steps"][-1][3] = True  # the run's max_steps cut the episode there, and its last step says so
    if name == "atari_pong":
        # Frames are stored beside the step as PNGs, which the replay shows as images.
        assert all(step[1]["__ndarray__"]["artifact"].endswith(".png") for step in steps)
    assert stored_plain(rollout.initial_observation, rollout_id=rollout.pk) == bare["reset"]
    assert [[stored_plain(step[1], rollout_id=rollout.pk), *step[2:]] for step in steps] == bare["steps"]

    # The built-in random agent acts there too, through Gymnasium's own action space.
    rollout = play_one(team, owner, version, random_agent(team, owner), task_id=task_id, seed=seed, limits=limits)
    assert rollout.status in ("succeeded", "failed") and rollout.step_count > 0, rollout.error
