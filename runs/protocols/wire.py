"""OpenEnv's wire shapes for studio episodes, as openenv-core 0.3.0 writes them (serialization.py's
`serialize_observation`, types.py's State, mcp_types.py's tool observations) and reads them (its
typed clients build `MyObservation(**payload["observation"], reward=..., done=...)`).

An observation's fields are the environment's own: a JSON object observation is its keys, any
other value is `{"observation": value}`. The studio's facts (episode and rollout ids, step, info,
terminated/truncated) ride in `observation.metadata` (and `state.metadata`), the room the protocol
leaves: nothing a client reads changes shape. Actions come in three forms, by what the version
declares: an object with its own fields (`action_schema`), MCP's `call_tool`/`list_tools` (tools),
or `{"action": value}` (a Gymnasium-style space). Bad actions get pydantic's error list, as
openenv-core's `deserialize_action` would raise it for the same action model.
"""
import functools
import json
from dataclasses import dataclass

import jsonschema
from pydantic.version import version_short

RESERVED_FIELDS = frozenset({"reward", "done", "metadata"})  # serialize_observation leaves these out
ERRORS_URL = f"https://errors.pydantic.dev/{version_short()}/v/"

# -- observations, steps, state -----------------------------------------------------------------------


def observation_fields(observation) -> dict:
    """The environment's observation as an OpenEnv observation's fields."""
    if isinstance(observation, dict) and not RESERVED_FIELDS & observation.keys():
        return dict(observation)
    return {"observation": observation}


def facts_of(episode, *, step: int, terminated=False, truncated=False, info=None) -> dict:
    """The studio's facts about an episode's moment (observation.metadata)."""
    return {"episode_id": episode.episode_id, "rollout_id": episode.rollout_id, "task_id": episode.task_id,
            "seed": episode.seed, "version": episode.version_label, "step": step, "terminated": bool(terminated),
            "truncated": bool(truncated), "info": info if info is not None else {}}


def as_reward(value) -> float | None:
    """A reward as a float (the reference's StepResponse coerces to float; null stays null)."""
    return None if value is None else float(value)


def reset_payload(episode, *, info=None) -> dict:
    """The observation reply of a reset: reward 0.0 as a float, not done."""
    observation = {**observation_fields(episode.observation), "metadata": facts_of(episode, step=0, info=info)}
    return {"observation": observation, "reward": 0.0, "done": False}


def step_payload(episode, step: dict) -> dict:
    terminated, truncated = bool(step.get("terminated")), bool(step.get("truncated"))
    facts = facts_of(episode, step=episode.step_count, terminated=terminated, truncated=truncated, info=step.get("info"))
    if step.get("artifact_url"):
        facts["artifact_url"] = step["artifact_url"]
    return {"observation": {**observation_fields(step.get("observation")), "metadata": facts},
            "reward": as_reward(step.get("reward")), "done": terminated or truncated}


def state_payload(episode, seen: dict | None, *, version_label: str) -> dict:
    """OpenEnv's State: the environment's own `state()` fields beside episode_id and step_count."""
    if episode is None:
        return {"episode_id": None, "step_count": 0, "metadata": {"version": version_label, "done": False}}
    seen = seen or {}
    own = seen.get("env_state") if isinstance(seen.get("env_state"), dict) else {}
    facts = {"rollout_id": episode.rollout_id, "task_id": episode.task_id, "seed": episode.seed,
             "version": episode.version_label, "done": bool(seen.get("done") or episode.done or episode.closed)}
    return {**{key: value for key, value in own.items() if key != "metadata"}, "episode_id": episode.episode_id,
            "step_count": int(seen.get("step_count", episode.step_count) or 0), "metadata": facts}


# -- tools (MCP) ------------------------------------------------------------------------------------------


def tool_of(spec: dict) -> dict:
    """openenv-core's Tool (name, description, input_schema), as a `list_tools` step answers it."""
    return {"name": spec["name"], "description": spec["description"], "input_schema": spec["parameters"]}


def mcp_tool_of(spec: dict) -> dict:
    """An MCP tool as openenv-core's `tools/list` dumps it (mcp.types.Tool's fields, snake case)."""
    return {"name": spec["name"], "title": None, "description": spec["description"], "input_schema": spec["parameters"],
            "execution": None, "output_schema": None, "icons": None, "annotations": None, "meta": None}


def call_result(step: dict, *, episode) -> dict:
    """A tool call's result in FastMCP's CallToolResult shape: the observation after the call is its
    data; the step's reward and ends ride in `meta`."""
    observation = step.get("observation")
    terminated, truncated = bool(step.get("terminated")), bool(step.get("truncated"))
    info = step.get("info") if isinstance(step.get("info"), dict) else {}
    meta = {**facts_of(episode, step=episode.step_count, terminated=terminated, truncated=truncated, info=info),
            "reward": as_reward(step.get("reward"))}
    return {"content": [{"type": "text", "text": json.dumps(observation, ensure_ascii=False, default=str),
                         "annotations": None, "meta": None}],
            "structured_content": observation if isinstance(observation, dict) else {"result": observation},
            "meta": meta, "data": observation, "is_error": info.get("valid") is False}


def list_tools_payload(tools: list[dict], *, facts: dict) -> dict:
    """A `list_tools` step: the tools, no environment step (reward null, as MCPEnvironment answers)."""
    return {"observation": {"tools": [tool_of(spec) for spec in tools], "metadata": facts}, "reward": None, "done": False}


def call_tool_payload(episode, name: str, step: dict) -> dict:
    payload = step_payload(episode, step)
    payload["observation"] = {"tool_name": name, "result": call_result(step, episode=episode), "error": None,
                              "metadata": payload["observation"]["metadata"]}
    return payload


def tool_error_payload(name, error_type: str, message: str, *, facts: dict) -> dict:
    """A tool call that never reached the environment (unknown tool, bad arguments): ToolError."""
    return {"observation": {"tool_name": name, "result": None, "error": {"error_type": error_type, "message": message},
                            "metadata": facts}, "reward": None, "done": False}


# -- actions ----------------------------------------------------------------------------------------------


class ActionInvalid(Exception):
    """An action that does not fit the version's action model; `errors` in pydantic's shape."""

    def __init__(self, errors: list[dict]):
        super().__init__(errors[0]["msg"] if errors else "invalid action")
        self.errors = errors


@dataclass(frozen=True)
class ActionForm:
    """How a version's OpenEnv actions look: `object` (the fields are the action), `tools` (MCP's
    call_tool / list_tools), or `value` ({"action": value})."""

    kind: str
    schema: dict
    tools: tuple = ()

    def openenv_schema(self) -> dict:
        """The JSON schema `/schema` publishes for an action (pydantic's form, metadata included)."""
        metadata = {"additionalProperties": True, "description": "Additional metadata for the action",
                    "title": "Metadata", "type": "object"}
        if self.kind == "object":
            schema = dict(self.schema)
            return {**schema, "title": schema.get("title", "StudioAction"), "type": "object",
                    "properties": {"metadata": metadata, **(schema.get("properties") or {})}}
        if self.kind == "tools":
            return {"additionalProperties": False, "title": "CallToolAction", "type": "object", "required": ["tool_name"],
                    "properties": {"metadata": metadata,
                                   "type": {"const": "call_tool", "default": "call_tool", "title": "Type", "type": "string"},
                                   "tool_name": {"enum": [spec["name"] for spec in self.tools], "title": "Tool Name", "type": "string"},
                                   "arguments": {"additionalProperties": True, "title": "Arguments", "type": "object"}}}
        return {"additionalProperties": False, "title": "StudioAction", "type": "object", "required": ["action"],
                "properties": {"metadata": metadata, "action": {"title": "Action", **self.schema}}}


def action_form(*, action_schema: dict | None, tools: list[dict], value_schema: dict) -> ActionForm:
    if isinstance(action_schema, dict) and action_schema:
        return ActionForm("object", action_schema)
    if tools:
        return ActionForm("tools", {}, tuple(tools))
    return ActionForm("value", value_schema)


def action_parse(form: ActionForm, data) -> tuple[str, object]:
    """("step", studio action) | ("call", (tool name, arguments)) | ("list", None), or ActionInvalid.
    `data` is the OpenEnv action (a websocket step's `data`, an HTTP step's `action`)."""
    if not isinstance(data, dict):
        raise ActionInvalid([_error("model_type", [], "Input should be a valid dictionary or instance of Action", data)])
    fields = {key: value for key, value in data.items() if key != "metadata"}
    if "metadata" in data and not isinstance(data["metadata"], dict):
        raise ActionInvalid([_error("dict_type", ["metadata"], "Input should be a valid dictionary", data["metadata"])])
    if form.kind == "tools":
        kind = fields.get("type")
        if kind == "list_tools" and set(fields) <= {"type"}:
            return "list", None
        if kind == "call_tool":
            return "call", _tool_call(fields)
        if set(fields) == {"action"} and isinstance(fields["action"], dict):  # the studio's own {"tool", "arguments"}
            call = fields["action"]
            return "call", (call.get("tool"), call.get("arguments") if isinstance(call.get("arguments"), dict) else {})
        raise ActionInvalid([_error("union_tag_invalid", ["type"], "Input tag should be 'call_tool' or 'list_tools'", kind,
                                    ctx={"discriminator": "'type'", "tag": str(kind), "expected_tags": "'call_tool', 'list_tools'"})])
    if form.kind == "object":
        _check(form.schema, fields, [])
        return "step", fields
    if not form.schema and not (set(fields) == {"action"}):  # nothing declared: an object action, as sent
        return "step", fields
    if "action" not in fields:
        raise ActionInvalid([_error("missing", ["action"], "Field required", data)])
    extra = [key for key in fields if key != "action"]
    if extra:
        raise ActionInvalid([_error("extra_forbidden", [key], "Extra inputs are not permitted", fields[key]) for key in extra])
    _check(form.schema, fields["action"], ["action"])
    return "step", fields["action"]


def _tool_call(fields: dict) -> tuple:
    errors = []
    for key in fields:
        if key not in ("type", "tool_name", "arguments"):
            errors.append(_error("extra_forbidden", [key], "Extra inputs are not permitted", fields[key]))
    if not isinstance(fields.get("tool_name"), str):
        errors.append(_error("missing", ["tool_name"], "Field required", fields) if "tool_name" not in fields
                      else _error("string_type", ["tool_name"], "Input should be a valid string", fields["tool_name"]))
    arguments = fields.get("arguments", {})
    if not isinstance(arguments, dict):
        errors.append(_error("dict_type", ["arguments"], "Input should be a valid dictionary", arguments))
    if errors:
        raise ActionInvalid(errors)
    return fields["tool_name"], arguments


def tool_arguments_problem(spec: dict, arguments: dict) -> str | None:
    """Why arguments do not fit a tool's parameters (None when they do)."""
    errors = schema_errors(spec["parameters"], arguments, [])
    return "; ".join(f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}" for error in errors) or None


def _check(schema: dict, value, prefix: list) -> None:
    errors = schema_errors(schema, value, prefix)
    if errors:
        raise ActionInvalid(errors)


# -- JSON-schema errors in pydantic's shape -----------------------------------------------------------------


def _error(kind: str, loc: list, msg: str, value, ctx: dict | None = None) -> dict:
    error = {"type": kind, "loc": loc, "msg": msg, "input": value}
    if ctx:
        error["ctx"] = ctx
    error["url"] = ERRORS_URL + kind
    return error


@functools.lru_cache(maxsize=512)
def _compiled_by_json(schema_json: str):
    """(validator, fast check or None) of a schema, built once per distinct schema."""
    schema = json.loads(schema_json)
    return jsonschema.Draft202012Validator(schema), fast_check(schema)


# Schema objects already compiled, by identity (a version's action form keeps its schema for every
# step): a step's check costs no serialisation of the schema, only the check itself.
_compiled_by_id: dict[int, tuple[dict, object, object]] = {}


def _compiled(schema: dict):
    found = _compiled_by_id.get(id(schema))
    if found is not None and found[0] is schema:
        return found[1], found[2]
    validator, fast = _compiled_by_json(json.dumps(schema, sort_keys=True))
    if len(_compiled_by_id) > 4096:
        _compiled_by_id.clear()
    _compiled_by_id[id(schema)] = (schema, validator, fast)
    return validator, fast


# -- fast checks: common shapes (a discrete index, a box array, an object of plain fields, a tool
# call) as plain Python. A fast check only ever says "valid"; anything else goes to the validator,
# which says what is wrong, so errors are the same as ever. --------------------------------------

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "$schema", "format",
                          "deprecated", "readOnly", "writeOnly"})  # format asserts nothing (no format checker)
_TYPE_TESTS = {
    "integer": lambda v: type(v) is int, "number": lambda v: type(v) is int or type(v) is float,
    "string": lambda v: type(v) is str, "boolean": lambda v: type(v) is bool, "null": lambda v: v is None,
    "object": lambda v: type(v) is dict, "array": lambda v: type(v) is list,
}
_FAST_KEYWORDS = frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                            "items", "prefixItems", "minItems", "maxItems", "properties", "required",
                            "additionalProperties", "enum", "const", "anyOf"}) | _ANNOTATIONS


def _plain(option) -> bool:
    return type(option) is str or type(option) is int


def fast_check(schema):
    """A function value -> True when `value` certainly fits `schema`, or None when the schema uses
    anything beyond the common shapes (then every check goes to the validator)."""
    if schema is True or schema == {}:
        return lambda value: True
    if not isinstance(schema, dict) or not schema.keys() <= _FAST_KEYWORDS:
        return None
    tests = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not all(isinstance(k, str) and k in _TYPE_TESTS for k in kinds):
            return None
        if len(kinds) == 1:
            tests.append(_TYPE_TESTS[kinds[0]])
        else:
            kind_tests = [_TYPE_TESTS[k] for k in kinds]
            tests.append(lambda v: any(test(v) for test in kind_tests))
    numeric = lambda v: (type(v) is int or type(v) is float)  # noqa: E731 - bounds bind numbers only
    for key, compare in (("minimum", lambda v, b: v >= b), ("maximum", lambda v, b: v <= b),
                         ("exclusiveMinimum", lambda v, b: v > b), ("exclusiveMaximum", lambda v, b: v < b)):
        if key in schema:
            bound = schema[key]
            if not numeric(bound):
                return None
            tests.append(lambda v, bound=bound, compare=compare: not numeric(v) or compare(v, bound))
    for key, compare in (("minLength", lambda n, b: n >= b), ("maxLength", lambda n, b: n <= b)):
        if key in schema:
            bound = schema[key]
            tests.append(lambda v, bound=bound, compare=compare: type(v) is not str or compare(len(v), bound))
    for key, compare in (("minItems", lambda n, b: n >= b), ("maxItems", lambda n, b: n <= b)):
        if key in schema:
            bound = schema[key]
            tests.append(lambda v, bound=bound, compare=compare: type(v) is not list or compare(len(v), bound))
    if "enum" in schema or "const" in schema:
        options = schema["enum"] if "enum" in schema else [schema["const"]]
        if not isinstance(options, list) or not all(_plain(option) for option in options):
            return None
        allowed = frozenset((type(option), option) for option in options)
        tests.append(lambda v: _plain(v) and (type(v), v) in allowed)
    if "prefixItems" in schema:
        if not isinstance(schema["prefixItems"], list) or "items" in schema:
            return None
        firsts = [fast_check(sub) for sub in schema["prefixItems"]]
        if any(check is None for check in firsts):
            return None
        tests.append(lambda v: type(v) is not list or all(check(item) for check, item in zip(firsts, v)))
    if "items" in schema:
        each = fast_check(schema["items"])
        if each is None:
            return None
        tests.append(lambda v: type(v) is not list or all(each(item) for item in v))
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        extra = schema.get("additionalProperties", True)
        if not isinstance(properties, dict) or not isinstance(required, list) or extra not in (True, False):
            return None
        fields = {name: fast_check(sub) for name, sub in properties.items()}
        if any(check is None for check in fields.values()):
            return None

        def fits_object(v, fields=fields, required=tuple(required), closed=extra is False):
            if type(v) is not dict:
                return True
            for name in required:
                if name not in v:
                    return False
            for name, item in v.items():
                check = fields.get(name)
                if check is None:
                    if closed:
                        return False
                elif not check(item):
                    return False
            return True

        tests.append(fits_object)
    if "anyOf" in schema:
        branches = [fast_check(sub) for sub in schema["anyOf"]] if isinstance(schema["anyOf"], list) else [None]
        if not branches or any(check is None for check in branches):
            return None
        tests.append(lambda v: any(check(v) for check in branches))
    if len(tests) == 1:
        return tests[0]
    return lambda value: all(test(value) for test in tests)


def schema_errors(schema: dict, value, prefix: list) -> list[dict]:
    """The errors pydantic would report for `value` against a model of this JSON schema (at most 10)."""
    if not schema:
        return []
    validator, fast = _compiled(schema)
    if fast is not None and fast(value):
        return []
    found = [leaf for error in validator.iter_errors(value) for leaf in _closest(error)]
    errors = [shaped for error in found for shaped in _pydantic_errors(error, [*prefix, *error.absolute_path])]
    # pydantic reports the declared fields' errors first, unknown fields after them
    return sorted(errors, key=lambda error: error["type"] == "extra_forbidden")[:10]


_TYPE_ERRORS = {
    "integer": ("int_type", "Input should be a valid integer"), "number": ("float_type", "Input should be a valid number"),
    "string": ("string_type", "Input should be a valid string"), "boolean": ("bool_type", "Input should be a valid boolean"),
    "object": ("dict_type", "Input should be a valid dictionary"), "array": ("list_type", "Input should be a valid list"),
    "null": ("none_required", "Input should be None"),
}
_BOUNDS = {"minimum": ("greater_than_equal", "greater than or equal to", "ge"), "maximum": ("less_than_equal", "less than or equal to", "le"),
           "exclusiveMinimum": ("greater_than", "greater than", "gt"), "exclusiveMaximum": ("less_than", "less than", "lt")}


def _pydantic_errors(error, loc: list) -> list[dict]:
    kind, value, expected = error.validator, error.instance, error.validator_value
    if kind == "required":
        present = value if isinstance(value, dict) else {}
        return [_error("missing", [*loc, name], "Field required", value) for name in expected if name not in present]
    if kind == "additionalProperties" and isinstance(value, dict):
        known = set((error.schema.get("properties") or {}))
        return [_error("extra_forbidden", [*loc, key], "Extra inputs are not permitted", item)
                for key, item in value.items() if key not in known]
    if kind == "type":
        wanted = expected[0] if isinstance(expected, list) else expected
        code, msg = _TYPE_ERRORS.get(wanted, ("value_error", error.message))
        if wanted in ("integer", "number") and isinstance(value, str):
            code, msg = ("int_parsing", "Input should be a valid integer, unable to parse string as an integer") if wanted == "integer" \
                else ("float_parsing", "Input should be a valid number, unable to parse string as a number")
        return [_error(code, loc, msg, value)]
    if kind in _BOUNDS:
        code, words, key = _BOUNDS[kind]
        return [_error(code, loc, f"Input should be {words} {expected}", value, ctx={key: expected})]
    if kind in ("minLength", "maxLength"):
        code, words = ("string_too_short", "at least") if kind == "minLength" else ("string_too_long", "at most")
        unit = "character" if expected == 1 else "characters"
        return [_error(code, loc, f"String should have {words} {expected} {unit}", value,
                       ctx={"min_length" if kind == "minLength" else "max_length": expected})]
    if kind in ("minItems", "maxItems"):
        code, words = ("too_short", "at least") if kind == "minItems" else ("too_long", "at most")
        actual = len(value) if isinstance(value, list) else 0
        return [_error(code, loc, f"List should have {words} {expected} item{'s' if expected != 1 else ''} after validation, not {actual}",
                       value, ctx={"field_type": "List", "min_length" if kind == "minItems" else "max_length": expected, "actual_length": actual})]
    if kind in ("enum", "const"):
        options = [repr(option) for option in (list(expected) if kind == "enum" else [expected])]
        words = f"{', '.join(options[:-1])} or {options[-1]}" if len(options) > 1 else options[0]
        return [_error("literal_error", loc, f"Input should be {words}", value, ctx={"expected": words})]
    if kind == "pattern":
        return [_error("string_pattern_mismatch", loc, f"String should match pattern '{expected}'", value, ctx={"pattern": expected})]
    return [_error("value_error", loc, f"Value error, {error.message[:300]}", value if len(json.dumps(value, default=str)) < 2000 else "…")]


def _closest(error) -> list:
    """The errors of the alternative (anyOf branch) the value came closest to: "'name' is a required
    property" for the branch of the tool a call names, rather than "not valid under any"."""
    if not error.context:
        return [error]
    branches: dict = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0] if sub.relative_schema_path else 0, []).append(sub)
    named = [subs for subs in branches.values() if not any(sub.validator == "const" for sub in subs)]
    if not named:  # no alternative matched its discriminating constant (e.g. an unknown tool name)
        return [error]
    return [leaf for sub in min(named, key=len) for leaf in _closest(sub)]
