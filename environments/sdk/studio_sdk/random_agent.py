"""The studio's built-in random agent: in an agent sandbox, or in the worker for a bounded space.

The worker samples a bounded declared space (or tool list) itself, with a RandomAgent of its own; any
other space goes to an agent sandbox with the rollout's limits, which loads this module as its agent
and, with each `act`, is passed the environment's current action space and tools (`observe_space`).
It samples, from an rng seeded by the rollout's seed (a rerun repeats every action):
- the action space (`sample_action`: discrete, choice, text, box, multi_discrete, multi_binary);
- else one of the environment's tools, with arguments drawn from its JSON schema;
- in browser environments, a valid action on one of the page's interactive elements (the [n] ids
  of the observation's text view): click a link or button, fill an input, pick an option.
"""

from __future__ import annotations

import random
import re
import string
from typing import Any

from . import sample_action

NO_SPACE = "random agent: the environment has no action_space and no tools to sample from"

class RandomAgent:
    """One random agent's state: its rng (seeded by the rollout's seed) and the space it samples. The
    agent sandbox's module functions below use one; the worker keeps one per rollout when it samples a
    bounded space itself (runs/agents.py), and both draw the same actions for the same seed."""

    def __init__(self):
        self.rng = random.Random("random-agent:None")
        self.space: dict | None = None
        self.tools: list | None = None

    def reset(self, task: dict, seed: int | None) -> None:
        self.rng = random.Random(f"random-agent:{seed}")

    def observe_space(self, space: dict) -> None:
        """The environment's action space and tools as they stand now (an env may change them in reset)."""
        self.space, self.tools = space.get("action_space"), space.get("tools")

    def act(self, observation: Any, info: dict) -> Any:
        space = self.space
        if reads_observation(space):
            return sample_browser_action(observation, self.rng)
        if space and space.get("type") != "unsupported":
            try:
                return sample_action(space, self.rng)
            except (ValueError, KeyError, TypeError) as exc:
                if not self.tools:
                    raise ValueError(f"random agent cannot sample the action space {space!r}: {exc}") from None
        if self.tools:
            return sample_tool_call(self.tools, self.rng)
        raise ValueError(NO_SPACE)


def reads_observation(space: Any) -> bool:
    """Whether act() looks at the observation: only on a browser page (its interactive elements);
    elsewhere it samples the space alone, so the worker need not send it the observation."""
    return isinstance(space, dict) and "click" in (space.get("kinds") or ())


# The agent module's interface in an agent sandbox (the runner calls reset, observe_space, act).
_agent = RandomAgent()


def reset(task: dict, seed: int | None) -> None:
    _agent.reset(task, seed)


def observe_space(space: dict) -> None:
    _agent.observe_space(space)


def act(observation: Any, info: dict) -> Any:
    return _agent.act(observation, info)


def sample_tool_call(tools: list[dict], rng: random.Random) -> dict:
    """A random call of one of the env's tools, with arguments drawn from its JSON schema."""
    spec = rng.choice(tools)
    spec = spec.get("function", spec)  # OpenAI's {"type": "function", "function": {...}} form too
    schema = spec.get("parameters") or {}
    arguments = {name: _sample_schema(prop, rng) for name, prop in sorted((schema.get("properties") or {}).items())}
    return {"tool": spec.get("name"), "arguments": arguments}


def _sample_schema(schema: dict, rng: random.Random):
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 0)), int(schema.get("maximum", 100)))
    if kind == "number":
        return rng.uniform(float(schema.get("minimum", 0)), float(schema.get("maximum", 100)))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_sample_schema(schema.get("items") or {}, rng) for _ in range(rng.randint(0, 3))]
    if kind == "object":
        return {name: _sample_schema(prop, rng) for name, prop in sorted((schema.get("properties") or {}).items())}
    return _words(rng)


# One interactive element of a browser observation's text view: "[12] button "Buy"", "[3] input[email] ...".
_ELEMENT_RE = re.compile(r"^\[(\d+)\] (\S+)(.*)$")
_OPTIONS_RE = re.compile(r"options=(\[.*?\])(?: |$)")
_TEXT_INPUTS = {"text", "email", "search", "password", "tel", "url", "number", "date"}


def sample_browser_action(observation: Any, rng: random.Random) -> dict:
    """A valid random action on the page: click, fill or select one of its enabled elements, or scroll."""
    text = observation.get("text", "") if isinstance(observation, dict) else ""
    candidates = []
    for line in str(text).splitlines():
        match = _ELEMENT_RE.match(line)
        if match and " disabled" not in match.group(3):
            candidates.append((int(match.group(1)), match.group(2), match.group(3)))
    if not candidates:
        return {"action": "scroll", "dy": rng.choice([-400, 400])}
    element, kind, rest = rng.choice(candidates)
    if kind.startswith("input["):
        input_type = kind[len("input["):-1]
        if input_type in _TEXT_INPUTS:
            value = str(rng.randint(0, 100)) if input_type == "number" else _words(rng)
            return {"action": "fill", "id": element, "value": value}
        return {"action": "click", "id": element}
    if kind == "textarea":
        return {"action": "fill", "id": element, "value": _words(rng)}
    if kind == "select":
        options = _options(rest)
        if options:
            return {"action": "select", "id": element, "value": rng.choice(options)}
    return {"action": "click", "id": element}


def _options(rest: str) -> list[str]:
    import json  # noqa: PLC0415 - only browser pages need it

    match = _OPTIONS_RE.search(rest)
    if not match:
        return []
    try:
        options = json.loads(match.group(1))
    except ValueError:
        return []
    return [str(option) for option in options if str(option)]


def _words(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase + " ") for _ in range(rng.randint(1, 12))).strip() or "a"
