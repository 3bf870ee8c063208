"""StudioVectorEnv over array, dict and image observations against a running studio, step for step
beside Gymnasium's own SyncVectorEnv over the same environment (next-step autoreset); reset and
step info as the environment gave them, arrays with their dtype."""
import textwrap
import types

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.vector_env import AutoresetMode

from runs.models import Rollout
from studio_client import StudioClient, StudioEnv, StudioVectorEnv
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)

# The same Gymnasium environments run locally and, through the Env adapter, as studio packages.
# Deterministic whatever the seed, so a studio autoreset (a new episode, a new seed) and a local one
# (reset() with no seed) start alike.
ENVS = textwrap.dedent('''
    import gymnasium
    import numpy as np
    from gymnasium import spaces
    from studio_sdk import Environment, describe_space

    MOVES = np.array([[0, 1], [0, -1], [1, 0], [-1, 0]], dtype=np.float32)


    class Walker(gymnasium.Env):
        """Dict observations: a position and a step count."""

        observation_space = spaces.Dict({"position": spaces.Box(-3, 3, (2,), np.float32), "count": spaces.Discrete(10)})
        action_space = spaces.Discrete(4)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.position, self.count = np.zeros(2, dtype=np.float32), 0
            return self._observation(), {"start": "centre"}

        def step(self, action):
            self.position = self.position + MOVES[int(action)]
            self.count += 1
            terminated = bool(np.abs(self.position).max() >= 2)
            truncated = self.count >= 6 and not terminated
            return self._observation(), float(terminated), terminated, truncated, {"count": self.count}

        def _observation(self):
            return {"position": self.position.copy(), "count": self.count}


    class Dot(gymnasium.Env):
        """uint8 image observations: a white dot on a 48x48 frame; info holds int32 and float32 arrays."""

        SIZE = 48
        observation_space = spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
        action_space = spaces.Discrete(4)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.cell = np.array([24, 24], dtype=np.int32)
            return self._frame(), {"cell": self.cell.copy()}

        def step(self, action):
            self.cell = self.cell + (MOVES[int(action)] * 8).astype(np.int32)
            terminated = bool((self.cell <= 0).any() or (self.cell >= self.SIZE - 1).any())
            self.cell = np.clip(self.cell, 0, self.SIZE - 1).astype(np.int32)
            distance = np.array([np.abs(self.cell - 24).sum() / 24], dtype=np.float32)
            return self._frame(), float(terminated), terminated, False, {"cell": self.cell.copy(), "distance": distance}

        def _frame(self):
            frame = np.zeros(self.observation_space.shape, dtype=np.uint8)
            frame[self.cell[1], self.cell[0]] = 255
            frame[0, :, 0] = np.arange(self.SIZE, dtype=np.uint8)  # a gradient: the PNG must keep every value
            return frame


    class Adapter(Environment):
        """A Gymnasium environment as a studio one, its spaces and reset info reported."""

        gym_class = None

        def __init__(self):
            self.env = self.gym_class()
            self.observation_space = describe_space(self.env.observation_space)
            self.action_space = describe_space(self.env.action_space)

        def reset(self, task, seed):
            observation, self.reset_info = self.env.reset(seed=seed)
            return observation

        def step(self, action):
            return self.env.step(action)


    class WalkerEnv(Adapter):
        gym_class = Walker


    class DotEnv(Adapter):
        gym_class = Dot
''')


def local_envs():
    """The same source as a module of this process (studio_sdk is importable as the sandbox's is)."""
    module = types.ModuleType("vector_test_envs")
    exec(compile(ENVS, "vector_test_envs.py", "exec"), module.__dict__)  # noqa: S102 - the test's own source
    return module


@pytest.fixture(autouse=True)
def sdk_on_path(monkeypatch):
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "environments" / "sdk"))
    sys.modules.pop("vector_test_envs", None)


@pytest.fixture
def client(studio, token_of, owner):
    with StudioClient(studio, token_of(owner)) as studio_client:
        yield studio_client


def own_version(team, owner, slug, entrypoint):
    return package_version(team, owner, slug, ENVS, entrypoint=entrypoint, max_steps=100)


def env_info(infos: dict, keys) -> dict:
    return {key: infos[key] for key in keys if key in infos}


def assert_same_batch(studio, local):
    if isinstance(local, dict):
        assert set(studio) == set(local)
        for key in local:
            assert_same_batch(studio[key], local[key])
        return
    assert studio.dtype == local.dtype and studio.shape == local.shape
    np.testing.assert_array_equal(studio, local)


def steps_side_by_side(envs, local, steps: int, seed: int, info_keys=()):
    """Reset both with the same seeds, step both with the same random actions; compare each step."""
    observations, infos = envs.reset(seed=seed)
    expected, expected_infos = local.reset(seed=seed)
    assert_same_batch(observations, expected)
    assert envs.observation_space.contains(observations)
    local.action_space.seed(seed)
    ends = 0
    for _ in range(steps):
        actions = local.action_space.sample()
        observations, rewards, terminations, truncations, infos = envs.step(actions)
        expected, expected_rewards, expected_terminations, expected_truncations, expected_infos = local.step(actions)
        assert envs.observation_space.contains(observations)
        assert_same_batch(observations, expected)
        assert_same_batch(rewards, expected_rewards)
        assert_same_batch(terminations, expected_terminations)
        assert_same_batch(truncations, expected_truncations)
        for key in info_keys:
            assert (key in infos) == (key in expected_infos)
            if key in expected_infos:
                assert_same_batch(infos[key], expected_infos[key])
                assert_same_batch(infos[f"_{key}"], expected_infos[f"_{key}"])
        ends += int((terminations | truncations).sum())
    return ends


def test_cartpole_array_observations_batch_and_autoreset_as_sync_vector_env(client, team, owner):
    package_version(team, owner, "cartpole", "", entrypoint="gymnasium:CartPole-v1", max_steps=500)
    envs = StudioVectorEnv(client, "cartpole@1", num_envs=3)
    local = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(3)])
    assert envs.metadata["autoreset_mode"] == local.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert envs.single_observation_space == local.single_observation_space
    assert envs.observation_space == local.observation_space
    observations, infos = envs.reset(seed=[0, 1, 2])
    expected, _ = local.reset(seed=[0, 1, 2])
    assert_same_batch(observations, expected)
    local.action_space.seed(0)
    # CartPole draws its start from its own generator: after an autoreset the two runs start apart,
    # so each sub-environment is compared up to its first end and through the autoreset step after it.
    same, resetting, ended_rollouts = np.ones(3, dtype=bool), np.zeros(3, dtype=bool), {}
    for _ in range(60):
        actions = local.action_space.sample()
        observations, rewards, terminations, truncations, infos = envs.step(actions)
        expected, expected_rewards, expected_terminations, expected_truncations, _ = local.step(actions)
        assert observations.dtype == np.float32 and observations.shape == (3, 4)
        assert envs.observation_space.contains(observations)
        for index in np.flatnonzero(resetting):
            assert (rewards[index], terminations[index], truncations[index]) == (0.0, False, False)
            assert int(infos["rollout_id"][index]) != ended_rollouts[index]
            assert envs.single_observation_space.contains(observations[index])
        np.testing.assert_array_equal(observations[same], expected[same])
        np.testing.assert_array_equal(rewards[same], expected_rewards[same])
        np.testing.assert_array_equal(terminations[same], expected_terminations[same])
        resetting = terminations | truncations
        for index in np.flatnonzero(resetting):
            ended_rollouts[index] = int(infos["rollout_id"][index])
        same &= ~resetting
    assert ended_rollouts, "no CartPole episode ended in 60 random steps"
    envs.close()


def test_dict_observations_step_for_step_like_sync_vector_env(client, team, owner):
    own_version(team, owner, "walker", "env:WalkerEnv")
    module = local_envs()
    envs = StudioVectorEnv(client, "walker@1", num_envs=3)
    local = SyncVectorEnv([module.Walker for _ in range(3)])
    ends = steps_side_by_side(envs, local, 30, seed=5, info_keys=("count", "start"))
    assert envs.single_observation_space == local.single_observation_space
    assert envs.observation_space == local.observation_space and envs.action_space == local.action_space
    assert ends >= 3
    envs.close()
    # Now the version's spaces are published: a new vector env has them before any reset.
    again = StudioVectorEnv(client, "walker@1", num_envs=2)
    assert again.single_observation_space == local.single_observation_space
    again.close()


def test_uint8_image_observations_step_for_step_and_info_arrays_keep_their_dtype(client, team, owner):
    own_version(team, owner, "dot", "env:DotEnv")
    module = local_envs()
    envs = StudioVectorEnv(client, "dot@1", num_envs=2)
    local = SyncVectorEnv([module.Dot for _ in range(2)])
    ends = steps_side_by_side(envs, local, 20, seed=3, info_keys=("cell", "distance"))
    assert ends >= 2
    assert envs.single_observation_space == local.single_observation_space
    observations, *_, infos = envs.step(local.action_space.sample())
    assert observations.dtype == np.uint8 and observations.shape == (2, 48, 48, 3)
    assert infos["cell"].dtype == np.int32 and infos["cell"].shape == (2, 2)
    envs.close()

    env = StudioEnv(client, "dot@1")
    frame, info = env.reset(seed=0)
    assert frame.dtype == np.uint8 and env.observation_space.contains(frame)
    assert info["cell"].dtype == np.int32 and info["cell"].tolist() == [24, 24]
    *_, info = env.step(2)
    assert info["cell"].dtype == np.int32 and info["cell"].tolist() == [32, 24]
    assert info["distance"].dtype == np.float32 and info["distance"].tolist() == [pytest.approx(1 / 3)]
    rollout_id = env.session.rollout_id
    env.close()
    stored_info = client.request("GET", f"/rollouts/{rollout_id}/steps")["steps"][0]["info"]
    assert stored_info["cell"] == {"__ndarray__": {"dtype": "int32", "shape": [2], "data": [32, 24]}}


def test_reset_info_of_a_gymnasium_environment_reaches_the_client_and_the_rollout(client, team, owner):
    package_version(team, owner, "taxi", "", entrypoint="gymnasium:Taxi-v4", max_steps=50)
    env = StudioEnv(client, "taxi@1")
    _, info = env.reset(seed=0)
    assert info["prob"] == 1.0
    assert info["action_mask"].dtype == np.int8 and info["action_mask"].tolist() == [1, 1, 0, 0, 0, 0]
    *_, step_info = env.step(0)
    assert step_info["action_mask"].dtype == np.int8
    rollout = Rollout.objects.get(pk=info["rollout_id"])
    assert rollout.reset_info["prob"] == 1.0
    assert rollout.reset_info["action_mask"]["__ndarray__"]["dtype"] == "int8"
    env.close()

    envs = StudioVectorEnv(client, "taxi@1", num_envs=2)
    _, infos = envs.reset(seed=0)
    assert infos["_action_mask"].all() and infos["action_mask"].dtype == np.int8 and infos["action_mask"].shape == (2, 6)
    assert infos["prob"].tolist() == [1.0, 1.0]
    envs.close()
