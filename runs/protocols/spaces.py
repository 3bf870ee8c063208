"""A version's spaces and tools as the protocols publish them: Gymnasium-style space descriptions
(the SDK's `describe_space` form) and the JSON schemas of OpenEnv's `/schema` derived from them.

Spaces of a `gymnasium:<Id>` entrypoint are Gymnasium's own (a registered built-in environment,
made in this process: Gymnasium's code, not the author's). Tools and action spaces of other
environments come from their sandbox, so they are remembered from the episodes opened (Redis,
per version: a version never changes) and published from then on.
"""
import functools
import json

from environments.package import task_split
from runs.episodes import routing
from runs.episodes.setup import task_of

from . import wire

SEEN_TTL_S = 7 * 24 * 3600


def task_ids_of(version) -> list[str]:
    return [str(task["id"]) for task in version.tasks]


def training_task_ids_of(version) -> list[str]:
    """The task ids a training loop may be given unasked: every one not held out (split = eval)."""
    return [str(task["id"]) for task in version.tasks if task_split(task) == "train"]


def task_for_seed(version, seed: int) -> str:
    """The task an episode gets when only a seed is given: the same seed, the same training task (a held-out
    task is served only when named; a version whose every task is held out gives them by seed)."""
    ids = training_task_ids_of(version) or task_ids_of(version)
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
    """Keep what an opened episode reported (tools, action and observation spaces, action schema) as
    the version's published ones."""
    seen = {"tools": opened.get("tools") or [], "action_space": opened.get("action_space"),
            "observation_space": opened.get("observation_space"), "action_schema": opened.get("action_schema")}
    routing.client().set(_seen_key(version), json.dumps(seen), ex=SEEN_TTL_S)


def version_spaces(*, version, task_id: str | None = None) -> dict:
    """{"action_space", "observation_space", "action_schema", "tools"}: descriptions (or None when not known)."""
    tools, action_space, observation_space, action_schema = [], None, None, None
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
        observation_space = observation_space or seen.get("observation_space")
        action_schema = seen.get("action_schema")
    return {"action_space": action_space, "observation_space": observation_space, "action_schema": action_schema, "tools": tools}


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


def action_form(spaces: dict) -> wire.ActionForm:
    """How this version's OpenEnv actions look (wire.ActionForm), from its published spaces."""
    value_schema = tool_call_schema(spaces["tools"]) if spaces.get("tools") else space_schema(spaces.get("action_space"))
    return wire.action_form(action_schema=spaces.get("action_schema"), tools=tool_list(spaces.get("tools") or []),
                            value_schema=value_schema)


def openenv_schemas(spaces: dict) -> dict:
    """OpenEnv's `/schema`: action, observation and state JSON schemas in pydantic's form."""
    metadata = {"additionalProperties": True, "description": "Additional metadata for the observation",
                "title": "Metadata", "type": "object"}
    observation_space = spaces.get("observation_space")
    fields = {"observation": {"title": "Observation", **space_schema(observation_space)}} if observation_space else {}
    observation = {
        "additionalProperties": not fields, "title": "StudioObservation", "type": "object", "required": list(fields),
        "properties": {
            "done": {"default": False, "description": "Whether the episode has terminated", "title": "Done", "type": "boolean"},
            "reward": {"anyOf": [{"type": "boolean"}, {"type": "integer"}, {"type": "number"}, {"type": "null"}],
                       "default": None, "description": "Reward signal from the last action", "title": "Reward"},
            "metadata": metadata, **fields,
        },
    }
    state = {
        "additionalProperties": True, "title": "State", "type": "object",
        "description": "The environment's own state() fields beside these; the studio's facts in metadata.",
        "properties": {
            "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None,
                           "description": "Unique identifier for the current episode", "title": "Episode Id"},
            "step_count": {"default": 0, "description": "Number of steps taken in the current episode", "minimum": 0,
                           "title": "Step Count", "type": "integer"},
        },
    }
    return {"action": action_form(spaces).openenv_schema(), "observation": observation, "state": state}
