"""MCP's JSON-RPC as openenv-core answers it (http_server.py's `mcp_handler`): `tools/list`,
`tools/call` and OpenEnv's `openenv/session/create` / `openenv/session/close`, for the websocket's
`mcp` message and the HTTP `/mcp` route (runs/protocols/mcp.py). Every answer is a JSON-RPC
response (HTTP 200); errors carry `data` as the reference's do.

Who answers is a peer: the websocket session (its episode) or an HTTP caller (a session named by
`params.session_id`, or none: a one-call episode). A tool call is a recorded step of the episode.
"""
from typing import Protocol

from studio.errors import DomainError

from . import wire

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
INTERNAL_ERROR, SERVER_ERROR = -32603, -32000
DEFAULT_MESSAGES = {PARSE_ERROR: "Parse error", INVALID_REQUEST: "Invalid Request", METHOD_NOT_FOUND: "Method not found",
                    INVALID_PARAMS: "Invalid params", INTERNAL_ERROR: "Internal error", SERVER_ERROR: "Server error"}
NO_MCP = "Environment does not support MCP"
REQUEST_KEYS = {"jsonrpc", "method", "params", "id"}


def error(code: int, message: str | None = None, *, data=None, request_id=None) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message or DEFAULT_MESSAGES[code], "data": data}}


def result(value, *, request_id) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def request_problem(message) -> str | None:
    """Why a message is not a JSON-RPC request openenv-core's JsonRpcRequest accepts (None when it is)."""
    if not isinstance(message, dict):
        return "Invalid request: a JSON-RPC request is a JSON object"
    problems = [f"{key}: Extra inputs are not permitted" for key in message if key not in REQUEST_KEYS]
    if message.get("jsonrpc") != "2.0":
        problems.append("jsonrpc: Input should be '2.0'")
    if not isinstance(message.get("method"), str):
        problems.append("method: Field required" if "method" not in message else "method: Input should be a valid string")
    if "params" in message and not isinstance(message["params"], dict):
        problems.append("params: Input should be a valid dictionary")
    if message.get("id") is not None and (isinstance(message["id"], bool) or not isinstance(message["id"], (str, int))):
        problems.append("id: Input should be a valid string or integer")
    return f"Invalid request: {len(problems)} validation errors for JsonRpcRequest: " + "; ".join(problems) if problems else None


class McpPeer(Protocol):
    """The episode side of MCP calls: a websocket session, or HTTP callers naming their sessions."""

    async def tools(self, session_id: str | None) -> list[dict] | None:
        """The tools (runs/protocols/spaces.tool_list entries), or None for a version without tools."""

    async def call(self, session_id: str | None, name: str, arguments: dict) -> dict:
        """Step the tool call in the session's episode; the result in CallToolResult's shape."""

    async def create(self) -> str:
        """Open a session (an episode); its id."""

    async def close(self, session_id: str) -> None:
        """Close a session: SessionUnknown when there is none of that id."""


class SessionUnknown(Exception):
    pass


class SessionRefused(Exception):
    """A session the peer will not close or use (a websocket's own, say): INVALID_REQUEST."""


async def answer(message: dict, peer: McpPeer) -> dict:
    """The response to one valid JSON-RPC request (see request_problem)."""
    method, params, request_id = message["method"], message.get("params") or {}, message.get("id")
    session_id = params.get("session_id")
    try:
        if method == "openenv/session/create":
            return result({"session_id": await peer.create()}, request_id=request_id)
        if method == "openenv/session/close":
            if not session_id:
                return error(INVALID_PARAMS, "Invalid params - 'session_id' is required", request_id=request_id)
            await peer.close(session_id)
            return result({"session_id": session_id, "closed": True}, request_id=request_id)
        if method not in ("tools/list", "tools/call"):
            return error(METHOD_NOT_FOUND, f"Method not found: {method}", request_id=request_id)
        tools = await peer.tools(session_id)
        if tools is None:
            return error(INTERNAL_ERROR, NO_MCP, request_id=request_id)
        if method == "tools/list":
            return result({"tools": [wire.mcp_tool_of(spec) for spec in tools]}, request_id=request_id)
        name, arguments = params.get("name"), params.get("arguments", {})
        if not name:
            return error(INVALID_PARAMS, "Missing 'name' in params", request_id=request_id)
        spec = next((spec for spec in tools if spec["name"] == name), None)
        if spec is None:
            return error(INVALID_PARAMS, f"Tool not found: {name}", request_id=request_id)
        problem = wire.tool_arguments_problem(spec, arguments) if isinstance(arguments, dict) else "arguments must be an object"
        if problem:
            return error(INVALID_PARAMS, f"Invalid arguments for {name}: {problem}", request_id=request_id)
        return result(await peer.call(session_id, name, arguments), request_id=request_id)
    except SessionUnknown:
        return error(INVALID_PARAMS, f"Unknown session_id: {session_id}", request_id=request_id)
    except SessionRefused as refused:
        return error(INVALID_REQUEST, str(refused), request_id=request_id)
    except DomainError as exc:
        return error(SERVER_ERROR, exc.message, request_id=request_id)
