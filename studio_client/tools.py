"""Environment tools as language models take them: tool specs in OpenAI's function form and the
tool call a text answer maps to. One definition for the studio's own model agent and exports and for
the Inspect and verifiers adapters that run against a remote studio."""


def function_tools(tools) -> list[dict]:
    """Tool specs in OpenAI's function form, {"type": "function", "function": {name, description, parameters}}."""
    out = []
    for spec in tools or []:
        if not isinstance(spec, dict):
            continue
        function = spec.get("function", spec)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        out.append({"type": "function", "function": {
            "name": function["name"],
            "description": str(function.get("description") or ""),
            "parameters": function.get("parameters") if isinstance(function.get("parameters"), dict) else {"type": "object", "properties": {}},
        }})
    return out


def text_answer_call(text_answer, tools: dict[str, dict]) -> tuple[str, str] | None:
    """(tool, argument) a text answer maps to, from environment.toml's `text_answer = "tool"` (its
    first required string argument) or `"tool.argument"`; None when the tool or argument is missing."""
    if not isinstance(text_answer, str) or not text_answer.strip():
        return None
    name, _, argument = text_answer.strip().partition(".")
    spec = tools.get(name)
    if spec is None:
        return None
    properties = (spec.get("parameters") or {}).get("properties") or {}
    if argument:
        return (name, argument) if argument in properties or not properties else None
    required = (spec.get("parameters") or {}).get("required") or []
    strings = [key for key, prop in properties.items() if isinstance(prop, dict) and prop.get("type") == "string"]
    for key in [*[r for r in required if r in strings], *strings]:
        return name, key
    return None
