"""studio_sdk: what an Environment Studio environment is written against.

The sandbox puts this folder on sys.path, so a package's env.py imports it directly. Everything an
environment returns crosses the sandbox boundary as JSON (`jsonable` converts), except numpy arrays
in observations, which cross as raw binary and reach the agent as the same arrays (`encodable`). Pure
Python; numpy and gymnasium are used only when the environment uses them.

Example env.py (entrypoint "env:CoinFlip")::

    from studio_sdk import Environment, tool

    class CoinFlip(Environment):
        action_space = {"type": "choice", "values": ["heads", "tails"]}
        tools = [tool("call", "Call the coin", {
            "type": "object",
            "properties": {"side": {"type": "string", "enum": ["heads", "tails"]}},
            "required": ["side"],
        })]

        def reset(self, task, seed):
            self.seed_rng(seed, task["id"])       # same task + seed -> same episode
            self.coin = self.rng.choice(["heads", "tails"])
            self.called = None
            return "A coin was flipped. Call it."

        def step(self, action):
            self.called = action["arguments"]["side"] if isinstance(action, dict) else action
            reward = 1.0 if self.called == self.coin else 0.0
            return f"It was {self.coin}.", reward, True, False, {}

        def verify(self):                         # judges the final state, not the step rewards
            if self.called == self.coin:
                return 1.0, f"called {self.coin} correctly"
            return 0.0, f"called {self.called}, coin was {self.coin}"
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import math
import random
import re
import sys
from typing import Any, NamedTuple

# The version's seed secret: set by the runner in an environment's own sandbox only (never in an agent's),
# so an agent cannot recompute an episode's hidden draws from the seed and the task it is shown.
_seed_secret: bytes | None = None


def set_seed_secret(secret: str | None) -> None:
    """Called by the sandbox runner before the environment loads; not for environment code."""
    global _seed_secret
    _seed_secret = secret.encode("utf-8") if secret else None


__all__ = [
    "Environment",
    "GymnasiumEnvironment",
    "ACTION_SPACE_LIMITS",
    "StepResult",
    "action_space_problem",
    "encodable",
    "jsonable",
    "sample_action",
    "tool",
]


class StepResult(NamedTuple):
    """Gymnasium's five step values; a plain tuple of the same order works just as well."""

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict


class Environment:
    """Base class for environments. Override `reset` and `step`; `verify` and `tools` are optional.

    - `reset(task, seed)`: start an episode of `task` (a dict from tasks.jsonl); return the observation.
    - `step(action)`: apply a JSON action; return (observation, reward, terminated, truncated, info).
    - `verify()`: judge the final state and return (reward, reason), or None when there is no verifier.
    - `tools`: tool specs for LLM agents, in OpenAI function format (build them with `tool`).
    - `action_space`: a JSON description random agents sample from (see `sample_action`), or None.
    - `action_schema`: for actions that are JSON objects, their JSON schema (OpenEnv clients send the
      object's fields as their action, and `/schema` publishes it), or None.
    - `observation_space`: a JSON description of the observations (`describe_space`'s form), or None;
      published with the version's spaces once an episode has reported it (studio_client's spaces).
    - `reset_info`: optional; the info of the episode's start (Gymnasium's reset info), set in reset.
    - `state()`: optional; a JSON object of the episode's state, served at OpenEnv's `/state`.
    - `rng`: a random.Random; call `self.seed_rng(seed)` in reset so episodes are reproducible.
    """

    tools: list[dict] = []
    action_space: dict | None = None
    observation_space: dict | None = None
    action_schema: dict | None = None

    @property
    def rng(self) -> random.Random:
        # Lazily created, so subclasses that skip super().__init__() still have one.
        if "_rng" not in self.__dict__:
            self._rng = random.Random(0)
        return self._rng

    @rng.setter
    def rng(self, value: random.Random) -> None:
        self._rng = value

    def seed_rng(self, seed: int, *salt: Any) -> random.Random:
        """Reseed `self.rng` from the seed (and optional salt such as the task id); returns it.

        In the studio the seed is mixed (HMAC-SHA256) with the version's secret, which only this
        environment's sandbox holds: the same version, task and seed give the same draws, and an
        agent that knows the seed and the task still cannot recompute them."""
        material = ":".join(str(part) for part in (seed, *salt)) if salt else seed
        if _seed_secret is not None:
            material = hmac.new(_seed_secret, f"seed_rng:{material}".encode("utf-8"), hashlib.sha256).hexdigest()
        self.rng = random.Random(material)
        return self.rng

    def reset(self, task: dict, seed: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement reset(task, seed)")

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        raise NotImplementedError(f"{type(self).__name__} must implement step(action)")

    def verify(self) -> tuple[float, str] | None:
        return None

    def close(self) -> None:
        pass


_TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def tool(name: str, description: str, parameters: dict | None = None) -> dict:
    """A tool spec in OpenAI function format; `parameters` is a JSON schema of type object."""
    if not _TOOL_NAME_RE.match(name):
        raise ValueError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ValueError(f"parameters of tool {name!r} must be a JSON schema with \"type\": \"object\"")
    return {"name": name, "description": description, "parameters": parameters}


def jsonable(value: Any) -> Any:
    """`value` as plain JSON types: numpy scalars and arrays (through `tolist()`, not element by
    element), tuples, sets, bytes (base64 text), dataclasses, dicts and lists, recursively. Floats JSON
    cannot carry exactly become `{"__float__": "nan" | "inf" | "-inf" | "-0.0"}`. Raises TypeError
    naming any other type."""
    return _convert(value, False)


def encodable(value: Any) -> Any:
    """Like `jsonable`, but numpy arrays of numbers or booleans stay arrays: the sandbox protocol sends
    them as raw binary frames and the agent receives the same array (dtype and shape)."""
    return _convert(value, True)


_INF = float("inf")


def _float(value: float) -> Any:
    if value != value:
        return {"__float__": "nan"}
    if value == _INF or value == -_INF:
        return {"__float__": "inf" if value > 0 else "-inf"}
    if value == 0.0 and math.copysign(1.0, value) < 0:
        return {"__float__": "-0.0"}
    return value


def _convert(value: Any, keep_arrays: bool) -> Any:
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return _float(value)
    numpy = sys.modules.get("numpy")  # numpy values can only exist if numpy was imported
    if numpy is not None:
        if isinstance(value, numpy.ndarray):
            return _array(value, keep_arrays, numpy)
        if isinstance(value, numpy.generic):
            return _convert(value.item(), keep_arrays)
    if isinstance(value, dict):
        return {_jsonable_key(key): _convert(item, keep_arrays) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_convert(item, keep_arrays) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [_convert(item, keep_arrays) for item in value]
        return sorted(items, key=lambda item: (type(item).__name__, repr(item)))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _convert(getattr(value, field.name), keep_arrays) for field in dataclasses.fields(value)}
    raise TypeError(f"cannot convert {type(value).__module__}.{type(value).__qualname__} to JSON")


def _array(array, keep_arrays: bool, numpy) -> Any:
    kind = array.dtype.kind
    if keep_arrays and kind in "biuf" and array.ndim:
        return array
    if kind in "biu":
        return array.tolist()  # ints and bools need no look at each element
    if kind == "f" and bool(numpy.isfinite(array).all()) and not bool((numpy.signbit(array) & (array == 0)).any()):
        return array.tolist()
    return _convert(array.tolist(), keep_arrays)


def _jsonable_key(key: Any) -> str:
    key = jsonable(key)
    if isinstance(key, str):
        return key
    if isinstance(key, (bool, int, float)) or key is None:
        return str(key)
    raise TypeError(f"cannot use a {type(key).__name__} as a JSON object key")


# How large an action space may be: one sampled action stays small and quick to draw. The studio
# checks literal spaces at commit (environments/package.py) and sample_action checks every space.
ACTION_SPACE_LIMITS = {"text_max_length": 10_000, "values": 10_000, "elements": 100_000}
# A discrete space may name its actions ("names": ["NOOP", "FIRE", ...], from `start` on): pages
# show the names instead of the numbers; the action sent stays the number.
ACTION_NAME_MAX = 40


def action_space_problem(space: Any) -> str | None:
    """Why this action space cannot be sampled within ACTION_SPACE_LIMITS (None when it can)."""
    if not isinstance(space, dict):
        return f"action_space must be a JSON object, not {type(space).__name__}"
    kind = space.get("type")
    limits = ACTION_SPACE_LIMITS

    def count(value) -> int | None:
        shape = _as_shape(value)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            return None
        return math.prod(shape)

    if kind == "discrete":
        n = space.get("n")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return f"a discrete action space needs a positive integer n, not {n!r}"
        names = space.get("names")
        if names is not None and not (isinstance(names, list) and len(names) == n and all(
                isinstance(name, str) and 0 < len(name) <= ACTION_NAME_MAX for name in names)):
            return f"a discrete action space's names must be a list of n={n} names of 1 to {ACTION_NAME_MAX} characters"
    elif kind == "choice":
        values = space.get("values")
        if not isinstance(values, list) or not 1 <= len(values) <= limits["values"]:
            return f"a choice action space needs a list of 1 to {limits['values']} values"
    elif kind == "text":
        length = space.get("max_length", 16)
        if not isinstance(length, int) or isinstance(length, bool) or not 1 <= length <= limits["text_max_length"]:
            return f"a text action space's max_length must be an integer from 1 to {limits['text_max_length']}, not {length!r}"
        alphabet = space.get("alphabet", "x")
        if not isinstance(alphabet, str) or not 1 <= len(alphabet) <= limits["values"]:
            return f"a text action space's alphabet must be a string of 1 to {limits['values']} characters"
    elif kind in ("box", "multi_binary"):
        size = count(space.get("shape") if kind == "box" else space.get("n"))
        if size is None or size > limits["elements"]:
            return f"a {kind} action space needs a shape of at most {limits['elements']} elements"
    elif kind == "multi_discrete":
        nvec = space.get("nvec")
        if not isinstance(nvec, list) or not 1 <= len(nvec) <= limits["elements"]:
            return f"a multi_discrete action space needs an nvec of 1 to {limits['elements']} sizes"
    return None


def sample_action(space: dict | None, rng: random.Random) -> Any:
    """A random action from a JSON action space description, reproducible for a seeded rng."""
    if not space:
        raise ValueError("this environment has no action_space to sample from")
    problem = action_space_problem(space)
    if problem:
        raise ValueError(problem)
    kind = space.get("type")
    if kind == "discrete":
        return space.get("start", 0) + rng.randrange(space["n"])
    if kind == "choice":
        return rng.choice(space["values"])
    if kind == "text":
        length = rng.randint(1, space.get("max_length", 16))
        return "".join(rng.choice(space.get("alphabet", "abcdefghijklmnopqrstuvwxyz ")) for _ in range(length))
    if kind == "box":
        return _sample_box(space, rng)
    if kind == "multi_discrete":
        return [rng.randrange(n) for n in space["nvec"]]
    if kind == "multi_binary":
        return [rng.randrange(2) for _ in range(math.prod(_as_shape(space["n"])))]
    raise ValueError(f"cannot sample from action space type {kind!r}")


def _as_shape(value) -> list[int]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _sample_box(space: dict, rng: random.Random) -> list:
    shape = space["shape"]
    count = math.prod(shape)
    lows = _flatten(space["low"], count)
    highs = _flatten(space["high"], count)
    integer = str(space.get("dtype", "float")).startswith(("int", "uint"))
    values = []
    for low, high in zip(lows, highs):
        # Unbounded sides sample like Gymnasium does in spirit: around the finite bound or zero.
        low = -1e6 if low is None else low
        high = 1e6 if high is None else high
        values.append(rng.randint(int(low), int(high)) if integer else rng.uniform(low, high))
    return _reshape(values, shape)


def _flatten(value, count: int) -> list:
    if not isinstance(value, list):
        return [value] * count
    flat: list = []
    stack = [value]
    while stack:
        item = stack.pop(0)
        if isinstance(item, list):
            stack[:0] = item
        else:
            flat.append(item)
    return flat


def _reshape(values: list, shape: list[int]) -> Any:
    if not shape:
        return values[0]
    if len(shape) == 1:
        return values
    size = math.prod(shape[1:])
    return [_reshape(values[i * size:(i + 1) * size], shape[1:]) for i in range(shape[0])]


class GymnasiumEnvironment(Environment):
    """Wraps a registered Gymnasium environment (entrypoint "gymnasium:<id>").

    `reset(task, seed)` makes a fresh `gymnasium.make(id, **task.get("kwargs", {}))` and resets it
    with `seed`, so the same seed and actions give exactly Gymnasium's own observations and rewards.
    Gymnasium's reset info is kept as `self.reset_info` (its arrays kept, as step info's are) and,
    as plain JSON, as `self.last_info`.
    """

    def __init__(self, env_id: str):
        self.env_id = env_id
        self.env = None
        self.last_info: dict = {}
        self.reset_info: dict = {}
        self._kwargs: dict = {}

    def reset(self, task: dict, seed: int) -> Any:
        import gymnasium  # noqa: PLC0415 - only gymnasium-backed environments pay for the import

        self.close()
        self._kwargs = dict(task.get("kwargs") or {})
        self.env = gymnasium.make(self.env_id, **self._kwargs)
        observation, info = self.env.reset(seed=seed)
        self.env.action_space.seed(seed)
        self.seed_rng(seed)
        self.reset_info, self.last_info = encodable(info), jsonable(info)
        return encodable(observation)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.env is None:
            raise RuntimeError("step() called before reset()")
        observation, reward, terminated, truncated, info = self.env.step(self._to_gym_action(action))
        return StepResult(encodable(observation), float(reward), bool(terminated), bool(truncated), encodable(info))

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def sample_action(self) -> Any:
        """A random action from Gymnasium's own space sampler (seeded in reset)."""
        if self.env is None:
            raise RuntimeError("sample_action() called before reset()")
        return jsonable(self.env.action_space.sample())

    @property
    def action_space(self) -> dict | None:
        if self.env is not None:
            return named_space(self.env)
        import gymnasium  # noqa: PLC0415

        env = gymnasium.make(self.env_id, **self._kwargs)
        try:
            return named_space(env)
        finally:
            env.close()

    @property
    def observation_space(self) -> dict | None:
        return describe_space(self.env.observation_space) if self.env is not None else None

    def _to_gym_action(self, action: Any) -> Any:
        import numpy  # noqa: PLC0415
        from gymnasium import spaces  # noqa: PLC0415

        space = self.env.action_space
        if isinstance(space, spaces.Discrete):
            return int(action)
        if isinstance(space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
            return numpy.asarray(action, dtype=space.dtype).reshape(space.shape)
        return action


def named_space(env) -> dict:
    """The description of a Gymnasium env's action space, a discrete one with its actions' names when
    the env tells them (ALE's `get_action_meanings()`: NOOP, FIRE, RIGHT, ...)."""
    described = describe_space(env.action_space)
    meanings = getattr(env.unwrapped, "get_action_meanings", None)
    if described["type"] == "discrete" and callable(meanings):
        try:
            names = [str(name) for name in meanings()]
        except Exception:  # noqa: BLE001 - names are a courtesy of the env: without them the numbers stay
            names = None
        if names and action_space_problem({**described, "names": names}) is None:
            described["names"] = names
    return described


def describe_space(space) -> dict:
    """A JSON description of a Gymnasium space (non-finite Box bounds become null)."""
    from gymnasium import spaces  # noqa: PLC0415

    if isinstance(space, spaces.Discrete):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        def bounds(array):
            return [None if not math.isfinite(value) else value for value in array.astype(float).ravel().tolist()]

        return {
            "type": "box",
            "low": _reshape(bounds(space.low), list(space.shape)) if space.shape else bounds(space.low)[0],
            "high": _reshape(bounds(space.high), list(space.shape)) if space.shape else bounds(space.high)[0],
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "multi_discrete", "nvec": jsonable(space.nvec)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "multi_binary", "n": jsonable(space.n)}
    if isinstance(space, spaces.Dict):
        return {"type": "dict", "spaces": {str(key): describe_space(item) for key, item in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "tuple", "spaces": [describe_space(item) for item in space.spaces]}
    return {"type": "unsupported", "description": str(space)}
