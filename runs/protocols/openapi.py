"""A version's OpenEnv API described as openenv-core's FastAPI app describes itself: `/openapi.json`
(OpenAPI 3.1, with the version's action, observation and state schemas), and `/docs` (Swagger UI)
and `/redoc` pages. The pages load the Swagger UI and ReDoc that django-ninja vendors (served from
the studio's static files), never a CDN."""
import html
import json

from django.templatetags.static import static

TITLE = "OpenEnv Environment HTTP API"


def _json(schema_ref: str) -> dict:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}}}


def _validation_error() -> dict:
    return {"description": "Validation Error", "content": _json("HTTPValidationError")}


def openapi_document(*, version, schemas: dict, base_path: str) -> dict:
    """The OpenAPI document of a version's routes under `base_path`, as `create_app` would give."""
    def operation(summary: str, tag: str, *, body: str | None = None, response: str, params: list | None = None) -> dict:
        spec = {"tags": [tag], "summary": summary, "operationId": summary.lower().replace(" ", "_"),
                "responses": {"200": {"description": "Successful Response", "content": _json(response)}}}
        if body:
            spec["requestBody"] = {"content": _json(body), "required": body == "StepRequest"}
            spec["responses"]["422"] = _validation_error()
        if params:
            spec["parameters"] = params
        return spec

    episode_param = [{"name": "episode_id", "in": "query", "required": False,
                      "description": "The studio's episode (from the reset observation's metadata); none: a fresh state",
                      "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Episode Id"}}]
    components = {
        "Action": schemas["action"], "Observation": schemas["observation"], "State": schemas["state"],
        "ResetRequest": {"additionalProperties": True, "title": "ResetRequest", "type": "object", "properties": {
            "seed": {"anyOf": [{"minimum": 0, "type": "integer"}, {"type": "null"}], "default": None, "title": "Seed"},
            "episode_id": {"anyOf": [{"maxLength": 255, "type": "string"}, {"type": "null"}], "default": None, "title": "Episode Id"},
            "task_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Task Id"}}},
        "StepRequest": {"additionalProperties": True, "title": "StepRequest", "type": "object", "required": ["action"], "properties": {
            "action": {"$ref": "#/components/schemas/Action"},
            "episode_id": {"type": "string", "title": "Episode Id", "description": "The episode to step (HTTP keeps no session)"},
            "timeout_s": {"anyOf": [{"exclusiveMinimum": 0, "type": "number"}, {"type": "null"}], "default": None, "title": "Timeout S"},
            "request_id": {"anyOf": [{"maxLength": 255, "type": "string"}, {"type": "null"}], "default": None, "title": "Request Id"}}},
        "StepResponse": {"additionalProperties": False, "title": "StepResponse", "type": "object", "required": ["observation"], "properties": {
            "observation": {"additionalProperties": True, "type": "object", "title": "Observation"},
            "reward": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None, "title": "Reward"},
            "done": {"default": False, "title": "Done", "type": "boolean"}}},
        "SchemaResponse": {"additionalProperties": False, "title": "SchemaResponse", "type": "object",
                           "required": ["action", "observation", "state"],
                           "properties": {key: {"additionalProperties": True, "type": "object", "title": key.title()}
                                          for key in ("action", "observation", "state")}},
        "EnvironmentMetadata": {"additionalProperties": False, "title": "EnvironmentMetadata", "type": "object",
                                "required": ["name", "description"], "properties": {
                                    key: {"anyOf": [{"type": "string"}, {"type": "null"}], "title": key.replace("_", " ").title()}
                                    for key in ("name", "description", "readme_content", "version", "author", "documentation_url")}},
        "HealthResponse": {"additionalProperties": False, "title": "HealthResponse", "type": "object", "properties": {
            "status": {"enum": ["healthy", "unhealthy", "degraded"], "default": "healthy", "type": "string"}}},
        "JsonRpcResponse": {"additionalProperties": True, "title": "JsonRpcResponse", "type": "object"},
        "ValidationError": {"title": "ValidationError", "type": "object", "required": ["loc", "msg", "type"], "properties": {
            "loc": {"items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "title": "Location", "type": "array"},
            "msg": {"title": "Message", "type": "string"}, "type": {"title": "Error Type", "type": "string"},
            "input": {"title": "Input"}, "ctx": {"title": "Context", "type": "object"}}},
        "HTTPValidationError": {"title": "HTTPValidationError", "type": "object", "properties": {
            "detail": {"items": {"$ref": "#/components/schemas/ValidationError"}, "title": "Detail", "type": "array"}}},
    }
    paths = {
        "/reset": {"post": operation("Reset the environment", "Environment Control", body="ResetRequest", response="StepResponse")},
        "/step": {"post": operation("Execute an action in the environment", "Environment Control", body="StepRequest",
                                    response="StepResponse")},
        "/state": {"get": operation("Get current environment state", "State Management", response="State", params=episode_param)},
        "/metadata": {"get": operation("Get environment metadata", "Environment Info", response="EnvironmentMetadata")},
        "/health": {"get": operation("Health check", "Health", response="HealthResponse")},
        "/schema": {"get": operation("Get all JSON schemas", "Schema", response="SchemaResponse")},
        "/mcp": {"post": operation("Mcp Endpoint", "MCP", response="JsonRpcResponse")},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": TITLE, "version": "1.0.0",
                 "description": f"{version.label} on Environment Studio, over OpenEnv's HTTP API. The websocket session is at `/ws`.",
                 "contact": {"name": "OpenEnv Team", "url": "https://github.com/meta-pytorch/OpenEnv"},
                 "license": {"name": "BSD-3-Clause", "url": "https://github.com/meta-pytorch/OpenEnv/blob/main/LICENSE"}},
        "servers": [{"url": base_path}],
        "paths": paths,
        "components": {"schemas": components},
        "tags": [{"name": name} for name in ("Environment Control", "State Management", "Environment Info", "Schema", "Health", "MCP")],
    }


def docs_page(*, openapi_url: str) -> str:
    """Swagger UI over the document, set up by ninja's swagger-ui-init.js (no inline script)."""
    settings = html.escape(json.dumps({"url": openapi_url, "layout": "BaseLayout", "deepLinking": True}), quote=False)
    return f"""<!DOCTYPE html>
<html>
<head>
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link type="text/css" rel="stylesheet" href="{static('ninja/swagger-ui.css')}">
<title>{TITLE} - Swagger UI</title>
</head>
<body>
<script type="application/json" id="swagger-settings">{settings}</script>
<div id="swagger-ui"></div>
<script src="{static('ninja/swagger-ui-bundle.js')}"></script>
<script src="{static('ninja/swagger-ui-init.js')}"></script>
</body>
</html>
"""


def redoc_page(*, openapi_url: str) -> str:
    return f"""<!DOCTYPE html>
<html>
<head>
<title>{TITLE} - ReDoc</title>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1">
</head>
<body>
<redoc spec-url="{html.escape(openapi_url)}"></redoc>
<script src="{static('ninja/redoc.standalone.js')}"></script>
</body>
</html>
"""
