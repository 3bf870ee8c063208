"""studio_client's gymnasium.Env and VectorEnv against a running studio: Gymnasium's own check_env,
seeds that pick the same task and episode, and N episodes stepped per request with autoreset."""
import warnings

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.vector_env import AutoresetMode

from runs.models import Rollout, RolloutStatus, Step
from studio_client import JsonSpace, StudioClient, StudioEnv, StudioVectorEnv
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(studio, token_of, owner):
    with StudioClient(studio, token_of(owner)) as studio_client:
        yield studio_client


def test_studio_env_passes_gymnasiums_check_env(client, frozen_lake):
    env = StudioEnv(client, "frozen-lake@1")
    assert env.observation_space == spaces.Discrete(16) and env.action_space == spaces.Discrete(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert not [w for w in caught if "studio" in str(w.filename) or "precision" in str(w.message)]
    env.close()
    assert Rollout.objects.filter(run__agent__kind="remote").count() >= 3  # check_env's episodes, each recorded
    assert not Rollout.objects.filter(status=RolloutStatus.RUNNING).exists()


def test_a_seed_picks_the_same_task_and_the_same_episode(client, frozen_lake):
    env = StudioEnv(client, "frozen-lake@1")
    task_ids = env.task_ids
    first, info = env.reset(seed=len(task_ids) + 1)
    assert isinstance(first, np.int64) and info["task_id"] == task_ids[1] and info["seed"] == len(task_ids) + 1
    trajectory = [env.step(a)[:4] for a in (2, 2, 1)]
    again, info_again = env.reset(seed=len(task_ids) + 1)
    assert (again, info_again["task_id"]) == (first, info["task_id"]) and info_again["rollout_id"] != info["rollout_id"]
    assert [env.step(a)[:4] for a in (2, 2, 1)] == trajectory
    _, picked = env.reset(seed=0, options={"task_id": task_ids[-1]})
    assert picked["task_id"] == task_ids[-1]
    env.close()
    rollouts = Rollout.objects.filter(run__agent__kind="remote").order_by("id")
    assert [r.seed for r in rollouts] == [len(task_ids) + 1, len(task_ids) + 1, 0]
    assert list(Step.objects.filter(rollout=rollouts[0]).values_list("action", flat=True)) == [2, 2, 1]


def test_tool_environments_give_json_observations_and_tools(client, inventory):
    env = StudioEnv(client, "inventory-tools@1")
    observation, info = env.reset(seed=0, options={"task_id": "q1"})
    assert isinstance(env.observation_space, JsonSpace) and env.observation_space.contains(observation)
    assert observation["question"].startswith("How many blue widgets") and len(info["tools"]) == 3
    _, reward, terminated, _, step_info = env.step({"tool": "submit_answer", "arguments": {"answer": "42"}})
    assert (reward, terminated, step_info) == (1.0, True, {"valid": True})
    env.close()
    assert env.last_result["status"] == "succeeded"


def test_vector_env_steps_all_episodes_in_one_request_with_next_step_autoreset(client, frozen_lake):
    envs = StudioVectorEnv(client, "frozen-lake@1", num_envs=4)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert envs.single_observation_space == spaces.Discrete(16) and envs.observation_space.shape == (4,)
    observations, infos = envs.reset(seed=10)
    assert observations.shape == (4,) and list(infos["seed"]) == [10, 11, 12, 13]
    envs.action_space.seed(0)
    ended_at, steps = None, 0
    while ended_at is None and steps < 200:
        observations, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        steps += 1
        if (terminations | truncations).any():
            ended_at = int(np.flatnonzero(terminations | truncations)[0])
    assert ended_at is not None
    ended_rollout = int(infos["rollout_id"][ended_at])
    # The next step resets that environment: start state, reward 0, not done, a new rollout.
    observations, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
    assert (observations[ended_at], rewards[ended_at], terminations[ended_at], truncations[ended_at]) == (0, 0.0, False, False)
    assert int(infos["rollout_id"][ended_at]) != ended_rollout
    envs.close()
    wait_for(lambda: not Rollout.objects.filter(status=RolloutStatus.RUNNING).exists(), 10, "every episode to close")
    ended = Rollout.objects.get(pk=ended_rollout)
    assert ended.status in (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED) and ended.step_count >= 1
    assert Rollout.objects.filter(run__agent__kind="remote").count() >= 5
