"""A version's spaces and tools as the protocols publish them: Gymnasium-style space descriptions
(the SDK's `describe_space` form) and the JSON schemas of OpenEnv's `/schema` derived from them.

Spaces of a `gymnasium:<Id>` entrypoint are Gymnasium's own (a registered built-in environment,
made in this process: Gymnasium's code, not the author's). Tools and action spaces of other
environments come from their sandbox, so they are remembered from the episodes opened (Redis,
per version: a version never changes) and published from then on.
"""
import functools
import json

from runs.episodes import routing
from runs.episodes.setup import task_of

SEEN_TTL_S = 7 * 24 * 3600


def task_ids_of(version) -> list[str]:
    return [str(task["id"]) for task in version.tasks]


def task_for_seed(version, seed: int) -> str:
    """The task an episode gets when only a seed is given: the same seed, the same task."""
    ids = task_ids_of(version)
    if not ids:
        raise ValueError(f"{version.label} has no tasks")
    return ids[seed % len(ids)]


def gymnasium_id_of(version) -> str | None:
    """The Gymnasium id of a `gymnasium:<Id>` entrypoint whose environment ships with Gymnasium."""
    entrypoint = str((version.manifest or {}).get("entrypoint") or "")
    if not entrypoint.startswith("gymnasium:") or entrypoint.count(":") != 1:
        return None
    env_id = entrypoint.split(":", 1)[1]
    import gymnasium  # noqa: PLC0415

    spec = gymnasium.envs.registry.get(env_id)
    if spec is None or not isinstance(spec.entry_point, str) or not spec.entry_point.startswith("gymnasium.envs."):
        return None
    return env_id


@functools.lru_cache(maxsize=256)
def _gymnasium_spaces(env_id: str, kwargs_json: str) -> tuple[dict, dict]:
    import gymnasium  # noqa: PLC0415

    from environments.sdk.studio_sdk import describe_space  # noqa: PLC0415

    env = gymnasium.make(env_id, **json.loads(kwargs_json))
    try:
        return describe_space(env.action_space), describe_space(env.observation_space)
    finally:
        env.close()


def _seen_key(version) -> str:
    return f"{routing.prefix()}:protocols:seen:{version.pk}"


def spaces_remember(*, version, opened: dict) -> None:
    """Keep what an opened episode reported (tools, action space) as the version's published ones."""
    seen = {"tools": opened.get("tools") or [], "action_space": opened.get("action_space")}
    routing.client().set(_seen_key(version), json.dumps(seen), ex=SEEN_TTL_S)


def version_spaces(*, version, task_id: str | None = None) -> dict:
    """{"action_space", "observation_space", "tools"}: descriptions (or None when not known)."""
    tools, action_space, observation_space = [], None, None
    env_id = gymnasium_id_of(version)
    if env_id is not None:
        ids = task_ids_of(version)
        task = task_of(version, task_id or (ids[0] if ids else "")) or {}
        try:
            action_space, observation_space = _gymnasium_spaces(env_id, json.dumps(task.get("kwargs") or {}, sort_keys=True))
        except Exception:  # noqa: BLE001 - bad task kwargs: the episode's own start will say why
            action_space = observation_space = None
    raw = routing.client().get(_seen_key(version))
    if raw:
        seen = json.loads(raw)
        tools = seen.get("tools") or []
        action_space = action_space or seen.get("action_space")
    return {"action_space": action_space, "observation_space": observation_space, "tools": tools}


def space_schema(space: dict | None) -> dict:
    """The JSON schema of the values of a described space ({} accepts any JSON)."""
    if not space:
        return {}
    kind = space.get("type")
    if kind == "discrete":
        start = int(space.get("start", 0))
        return {"type": "integer", "minimum": start, "maximum": start + int(space["n"]) - 1}
    if kind == "choice":
        return {"enum": list(space.get("values") or [])}
    if kind == "box":
        return _array_schema(list(space.get("shape") or []), {"type": "number"})
    if kind == "multi_discrete":
        nvec = space.get("nvec")
        flat = nvec if isinstance(nvec, list) and all(isinstance(n, int) for n in nvec) else None
        if flat is not None:
            return {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": n - 1} for n in flat],
                    "minItems": len(flat), "maxItems": len(flat)}
        return {"type": "array"}
    if kind == "multi_binary":
        n = space.get("n")
        shape = n if isinstance(n, list) else [n]
        return _array_schema(shape, {"type": "integer", "enum": [0, 1]})
    return {}


def _array_schema(shape: list, item: dict) -> dict:
    schema = item
    for size in reversed(shape):
        schema = {"type": "array", "items": schema, "minItems": size, "maxItems": size}
    return schema


def tool_call_schema(tools: list[dict]) -> dict:
    """A studio tool call, {"tool": name, "arguments": {...}}, for any of the tools."""
    calls = []
    for spec in tools:
        name, parameters = _tool_name(spec), _tool_parameters(spec)
        if name:
            calls.append({"type": "object", "properties": {"tool": {"const": name}, "arguments": parameters or {"type": "object"}},
                          "required": ["tool", "arguments"], "additionalProperties": False})
    return {"anyOf": calls} if calls else {}


def _tool_name(spec: dict) -> str | None:
    function = spec.get("function") if isinstance(spec.get("function"), dict) else spec
    return function.get("name")


def _tool_parameters(spec: dict) -> dict:
    function = spec.get("function") if isinstance(spec.get("function"), dict) else spec
    return function.get("parameters") or function.get("inputSchema") or {}


def tool_list(tools: list[dict]) -> list[dict]:
    """Tools as (name, description, JSON-schema parameters), whichever form the environment used."""
    listed = []
    for spec in tools:
        function = spec.get("function") if isinstance(spec.get("function"), dict) else spec
        if function.get("name"):
            listed.append({"name": function["name"], "description": function.get("description") or "",
                           "parameters": _tool_parameters(spec) or {"type": "object", "properties": {}}})
    return listed


def action_value_schema(spaces: dict) -> dict:
    if spaces.get("tools"):
        return tool_call_schema(spaces["tools"])
    return space_schema(spaces.get("action_space"))


def openenv_schemas(spaces: dict) -> dict:
    """OpenEnv's `/schema`: action, observation and state JSON schemas."""
    metadata = {"type": "object", "additionalProperties": True, "title": "Metadata"}
    action = {
        "title": "StudioAction", "type": "object", "additionalProperties": False, "required": ["action"],
        "properties": {"action": {"title": "Action", **action_value_schema(spaces)}, "metadata": metadata},
    }
    observation = {
        "title": "StudioObservation", "type": "object", "additionalProperties": False,
        "properties": {
            "observation": {"title": "Observation", **space_schema(spaces.get("observation_space"))},
            "info": {"type": "object", "title": "Info"},
            "terminated": {"type": "boolean"}, "truncated": {"type": "boolean"},
            "episode_id": {"type": "string"}, "rollout_id": {"type": "integer"}, "step": {"type": "integer"},
            "done": {"type": "boolean", "default": False},
            "reward": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
            "metadata": metadata,
        },
    }
    state = {
        "title": "StudioState", "type": "object", "additionalProperties": True,
        "properties": {
            "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "step_count": {"type": "integer", "minimum": 0, "default": 0},
            "rollout_id": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "task_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "seed": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "version": {"type": "string"}, "done": {"type": "boolean"},
        },
    }
    return {"action": action, "observation": observation, "state": state}
