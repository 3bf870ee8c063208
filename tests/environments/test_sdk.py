"""studio_sdk: JSON conversion, tool specs, seeding, and the Gymnasium adapter's fidelity."""

import dataclasses
import datetime
import json
import random

import gymnasium
import numpy as np
import pytest
from runs.sandbox import protocol
from studio_sdk import Environment, GymnasiumEnvironment, StepResult, jsonable, sample_action, tool


# --- jsonable ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Position:
    x: int
    y: np.float32
    tags: tuple


def test_jsonable_converts_numpy_scalars_to_python_types():
    converted = jsonable([np.int64(3), np.float32(0.5), np.bool_(True), np.uint8(7)])
    assert converted == [3, 0.5, True, 7]
    assert [type(value) for value in converted] == [int, float, bool, int]


def test_jsonable_converts_arrays_tuples_and_sets():
    assert jsonable(np.arange(6).reshape(2, 3)) == [[0, 1, 2], [3, 4, 5]]
    assert jsonable((1, (2, 3))) == [1, [2, 3]]
    assert jsonable({3, 1, 2}) == [1, 2, 3]
    assert jsonable(frozenset({"b", "a"})) == ["a", "b"]


def test_jsonable_encodes_bytes_as_base64():
    assert jsonable(b"\x00\xffhi") == "AP9oaQ=="
    assert jsonable(bytearray(b"hi")) == "aGk="


def test_jsonable_converts_dataclasses_and_dict_keys_recursively():
    value = {1: Position(1, np.float32(2.5), ("a",)), "nested": {"array": np.zeros(2)}}
    converted = jsonable(value)
    assert converted == {"1": {"x": 1, "y": 2.5, "tags": ["a"]}, "nested": {"array": [0.0, 0.0]}}
    assert json.loads(json.dumps(converted)) == converted


def test_jsonable_keeps_plain_json_values():
    value = {"a": [1, 2.5, "x", None, True, False]}
    assert jsonable(value) == value


@pytest.mark.parametrize("value, type_name", [(object(), "object"), (1 + 2j, "complex"), (datetime.date(2024, 1, 1), "date")])
def test_jsonable_names_the_type_it_cannot_convert(value, type_name):
    with pytest.raises(TypeError, match=type_name):
        jsonable({"deep": [value]})


# --- tools, seeding, base class ---------------------------------------------------------------


def test_tool_builds_an_openai_function_spec():
    parameters = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    assert tool("lookup_item", "Find an item.", parameters) == {
        "name": "lookup_item",
        "description": "Find an item.",
        "parameters": parameters,
    }
    assert tool("noop", "Nothing.")["parameters"] == {"type": "object", "properties": {}}


def test_tool_refuses_bad_names_and_non_object_parameters():
    with pytest.raises(ValueError):
        tool("has space", "x")
    with pytest.raises(ValueError):
        tool("ok", "x", {"type": "string"})


class Dice(Environment):
    def reset(self, task, seed):
        self.seed_rng(seed, task["id"])
        return [self.rng.randint(1, 6) for _ in range(5)]


def test_seed_rng_makes_episodes_repeat_and_tasks_differ():
    assert Dice().reset({"id": "a"}, 1) == Dice().reset({"id": "a"}, 1)
    assert Dice().reset({"id": "a"}, 1) != Dice().reset({"id": "a"}, 2)
    assert Dice().reset({"id": "a"}, 1) != Dice().reset({"id": "b"}, 1)


def test_base_class_defaults():
    env = Dice()  # no __init__ of its own: rng must still exist
    assert isinstance(env.rng, random.Random)
    assert env.verify() is None
    assert env.tools == [] and env.action_space is None
    with pytest.raises(NotImplementedError):
        env.step(0)


def test_step_result_unpacks_as_gymnasiums_five_values():
    observation, reward, terminated, truncated, info = StepResult("obs", 1.0, True, False, {})
    assert (observation, reward, terminated, truncated, info) == ("obs", 1.0, True, False, {})


@pytest.mark.parametrize(
    "space",
    [
        {"type": "discrete", "n": 4},
        {"type": "discrete", "n": 10, "start": -5},
        {"type": "choice", "values": ["a", "b", {"tool": "x"}]},
        {"type": "text"},
        {"type": "box", "low": [-1.0, 0.0], "high": [1.0, None], "shape": [2], "dtype": "float32"},
    ],
)
def test_sample_action_is_reproducible_from_a_seed(space):
    first = [sample_action(space, random.Random(42)) for _ in range(3)]
    again = [sample_action(space, random.Random(42)) for _ in range(3)]
    assert first == again
    rng = random.Random(3)
    samples = [sample_action(space, rng) for _ in range(50)]
    if space["type"] == "discrete":
        start = space.get("start", 0)
        assert all(start <= value < start + space["n"] for value in samples)
    if space["type"] == "box":
        assert all(-1.0 <= value[0] <= 1.0 and value[1] >= 0.0 for value in samples)


# --- Gymnasium adapter ------------------------------------------------------------------------


def rollout_directly(env_id, kwargs, seed, actions):
    env = gymnasium.make(env_id, **kwargs)
    observation, _ = env.reset(seed=seed)
    trace, episode = [jsonable(observation)], 0
    for action in actions:
        observation, reward, terminated, truncated, _ = env.step(action)
        trace.append((jsonable(observation), float(reward), bool(terminated), bool(truncated)))
        if terminated or truncated:
            episode += 1
            env.close()
            env = gymnasium.make(env_id, **kwargs)
            observation, _ = env.reset(seed=seed + episode)
            trace.append(jsonable(observation))
    env.close()
    return trace


def rollout_through_adapter(env_id, kwargs, seed, actions):
    env = GymnasiumEnvironment(env_id)
    task = {"id": "t", "kwargs": kwargs}
    trace, episode = [jsonable(env.reset(task, seed))], 0
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        # Everything crosses the sandbox boundary: JSON, with arrays as binary frames.
        protocol.encode({"result": [observation, reward, terminated, truncated, info]})
        trace.append((jsonable(observation), reward, terminated, truncated))
        if terminated or truncated:
            episode += 1
            trace.append(jsonable(env.reset(task, seed + episode)))
    env.close()
    return trace


@pytest.mark.parametrize(
    "env_id, kwargs, n_actions",
    [
        ("FrozenLake-v1", {}, 4),
        ("FrozenLake-v1", {"map_name": "8x8", "is_slippery": False}, 4),
        # gymnasium 1.4 replaced Taxi-v3 with v4; a short time limit makes its random walk restart too.
        ("Taxi-v4", {"max_episode_steps": 20}, 6),
        ("CartPole-v1", {}, 2),
    ],
)
def test_adapter_matches_gymnasium_step_for_step(env_id, kwargs, n_actions):
    action_rng = random.Random(2024)
    actions = [action_rng.randrange(n_actions) for _ in range(50)]
    direct = rollout_directly(env_id, kwargs, 7, actions)
    adapted = rollout_through_adapter(env_id, kwargs, 7, actions)
    assert adapted == direct
    assert len(direct) > 51  # the seeded sequence ends at least one episode, so restarts are covered


def test_adapter_keeps_reset_info_as_plain_json():
    env = GymnasiumEnvironment("Taxi-v4")
    env.reset({"id": "t"}, 0)
    assert isinstance(env.last_info["action_mask"], list)
    assert set(env.last_info["action_mask"]) <= {0, 1}
    json.dumps(env.last_info)


def test_adapter_describes_discrete_and_box_action_spaces():
    assert GymnasiumEnvironment("FrozenLake-v1").action_space == {"type": "discrete", "n": 4, "start": 0}
    space = GymnasiumEnvironment("Pendulum-v1").action_space
    assert space == {"type": "box", "low": [-2.0], "high": [2.0], "shape": [1], "dtype": "float32"}


def test_adapter_turns_json_lists_into_box_actions():
    adapter, direct = GymnasiumEnvironment("Pendulum-v1"), gymnasium.make("Pendulum-v1")
    first, expected_first = adapter.reset({"id": "t"}, 5), direct.reset(seed=5)[0]
    # The observation stays Gymnasium's own array: same dtype, shape and bits.
    assert first.dtype == expected_first.dtype and first.tobytes() == expected_first.tobytes()
    for torque in (0.5, -1.25, 2.0):
        observation, reward, *_ = adapter.step([torque])
        expected_observation, expected_reward, *_ = direct.step(np.array([torque], dtype=np.float32))
        assert observation.dtype == np.float32 and observation.tobytes() == expected_observation.tobytes()
        assert reward == float(expected_reward)


def test_adapter_samples_reproducibly_from_the_reset_seed():
    def samples(seed):
        env = GymnasiumEnvironment("Taxi-v4")
        env.reset({"id": "t"}, seed)
        return [env.sample_action() for _ in range(20)]

    assert samples(3) == samples(3)
    assert all(isinstance(action, int) for action in samples(3))
