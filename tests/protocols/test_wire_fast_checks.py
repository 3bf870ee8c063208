"""Action checks compiled once per schema (runs/protocols/wire.py): the fast checks of the common
shapes only ever accept what the JSON-schema validator accepts, and a refused action gets the same
pydantic-shaped errors as before."""
import itertools

import jsonschema
import pytest

from runs.protocols import spaces, wire

SCHEMAS = [
    spaces.space_schema({"type": "discrete", "n": 4}),
    spaces.space_schema({"type": "box", "shape": [2, 3]}),
    spaces.space_schema({"type": "multi_discrete", "nvec": [3, 2]}),
    spaces.space_schema({"type": "multi_binary", "n": 3}),
    spaces.space_schema({"type": "choice", "values": ["left", "right"]}),
    {"type": "integer", "minimum": 2, "maximum": 5},
    {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
     "minItems": 3, "maxItems": 3},
    {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 2},
                                      {"type": "integer", "minimum": 0, "maximum": 1}], "minItems": 2, "maxItems": 2},
    {"type": "array", "items": {"type": "integer", "enum": [0, 1]}, "minItems": 3, "maxItems": 3},
    {"enum": ["left", "right", 3]},
    {"type": "object", "properties": {"x": {"type": "number", "minimum": -1, "exclusiveMaximum": 1},
                                      "name": {"type": "string", "minLength": 1, "maxLength": 3},
                                      "flag": {"type": ["boolean", "null"]}},
     "required": ["x"], "additionalProperties": False, "title": "Move"},
    {"anyOf": [{"type": "object", "properties": {"tool": {"const": "search"},
                                                  "arguments": {"type": "object", "properties": {"q": {"type": "string"}},
                                                                "required": ["q"]}},
                "required": ["tool", "arguments"], "additionalProperties": False},
               {"type": "object", "properties": {"tool": {"const": "stop"}, "arguments": {"type": "object"}},
                "required": ["tool", "arguments"], "additionalProperties": False}]},
]
VALUES = [0, 1, 3, 4, 5, -1, 2.0, 1.5, True, False, None, "1", "left", "right", "up", 3, "",
          [], [0, 1], [0, 1, 1], [1, 2, 0], [[0.5, 1], [2, 3], [4, 5]], [[0.5, "a"], [2, 3], [4, 5]], [[1, 2]],
          [2, 1], [3, 0], [True, 0, 1],
          {"x": 0.5}, {"x": 1}, {"x": -1, "name": "abc"}, {"x": 0, "name": ""}, {"x": 0, "flag": None},
          {"x": 0, "other": 1}, {"name": "a"}, {"x": "0"},
          {"tool": "search", "arguments": {"q": "cats"}}, {"tool": "search", "arguments": {}},
          {"tool": "stop", "arguments": {}}, {"tool": "nope", "arguments": {}}, {"tool": "stop"}]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_fast_check_accepts_exactly_what_the_validator_accepts_for_the_common_shapes(schema):
    fast = wire.fast_check(schema)
    assert fast is not None  # each of these shapes has a fast path
    validator = jsonschema.Draft202012Validator(schema)
    for value in VALUES:
        if fast(value):
            assert validator.is_valid(value), (schema, value)
        else:
            # Whatever the fast check leaves to the validator is decided there, errors and all.
            assert validator.is_valid(value) == (wire.schema_errors(schema, value, []) == [])


def test_schemas_beyond_the_common_shapes_have_no_fast_check_and_still_get_checked():
    schema = {"type": "string", "pattern": "^a+$"}
    assert wire.fast_check(schema) is None
    assert wire.schema_errors(schema, "aaa", []) == []
    assert wire.schema_errors(schema, "ab", ["action"])[0]["msg"] == "String should match pattern '^a+$'"


def test_refused_actions_get_the_same_errors_as_before():
    form = wire.ActionForm("value", {"type": "integer", "minimum": 0, "maximum": 3})
    for _ in itertools.repeat(None, 3):  # compiled once, the same answer each time
        with pytest.raises(wire.ActionInvalid) as refused:
            wire.action_parse(form, {"action": 7})
        assert refused.value.errors == [{"type": "less_than_equal", "loc": ["action"], "msg": "Input should be less than or equal to 3",
                                         "input": 7, "ctx": {"le": 3}, "url": wire.ERRORS_URL + "less_than_equal"}]
    assert wire.action_parse(form, {"action": 2}) == ("step", 2)
    with pytest.raises(wire.ActionInvalid) as refused:
        wire.action_parse(form, {"action": "two"})
    assert refused.value.errors[0]["type"] == "int_parsing"
