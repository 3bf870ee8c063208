"""Gymnasium spaces from the studio's space descriptions, and values across the JSON boundary."""
import json

import numpy as np
from gymnasium import spaces


class JsonSpace(spaces.Space):
    """Any JSON value: for environments whose observations or actions have no Gymnasium space
    (tool calls, text, nested objects). `sample()` picks one of `examples` when there are some."""

    def __init__(self, examples: list | None = None, seed=None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.examples = list(examples or [])

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask=None, probability=None):
        if not self.examples:
            raise NotImplementedError("this space has no examples to sample from")
        return self.examples[int(self.np_random.integers(len(self.examples)))]

    def contains(self, x) -> bool:
        try:
            json.dumps(x)
        except (TypeError, ValueError):
            return False
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, JsonSpace) and other.examples == self.examples

    def __repr__(self) -> str:
        return f"JsonSpace({len(self.examples)} examples)"


def space_from_description(description: dict | None) -> spaces.Space:
    """The Gymnasium space a description stands for (discrete, box, multi_discrete, multi_binary,
    dict and tuple of those; `choice` and anything else become a JsonSpace)."""
    kind = (description or {}).get("type")
    if kind == "dict":
        return spaces.Dict({str(key): space_from_description(item) for key, item in (description.get("spaces") or {}).items()})
    if kind == "tuple":
        return spaces.Tuple([space_from_description(item) for item in description.get("spaces") or []])
    if kind == "discrete":
        return spaces.Discrete(int(description["n"]), start=int(description.get("start", 0)))
    if kind == "box":
        dtype = np.dtype(description.get("dtype") or "float32")
        shape = tuple(description.get("shape") or ())
        low = _bound(description.get("low"), -np.inf, dtype)
        high = _bound(description.get("high"), np.inf, dtype)
        return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
    if kind == "multi_discrete":
        return spaces.MultiDiscrete(np.asarray(description["nvec"], dtype=np.int64))
    if kind == "multi_binary":
        return spaces.MultiBinary(description["n"])
    if kind == "choice":
        return JsonSpace(description.get("values"))
    return JsonSpace()


def _bound(value, infinite, dtype):
    if value is None:
        return infinite
    array = np.asarray(value, dtype=object)
    return np.where(array == None, infinite, array).astype(dtype)  # noqa: E711 - JSON null is an open bound


def observation_from_json(space: spaces.Space, value):
    """An observation (JSON, or already decoded by `from_json`: arrays as numpy) as the space's
    numpy value, dict and tuple spaces part by part (JsonSpace values stay as they are)."""
    if isinstance(space, spaces.Discrete):
        return np.int64(value)
    if isinstance(space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
        return np.asarray(value, dtype=space.dtype).reshape(space.shape)
    if isinstance(space, spaces.Dict) and isinstance(value, dict):
        return {key: observation_from_json(part, value.get(key)) for key, part in space.spaces.items()}
    if isinstance(space, spaces.Tuple) and isinstance(value, (list, tuple)):
        return tuple(observation_from_json(part, item) for part, item in zip(space.spaces, value))
    return value


def action_to_json(value):
    """A numpy (or plain) action as JSON for the server (dict and tuple actions part by part)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: action_to_json(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [action_to_json(item) for item in value]
    return value
