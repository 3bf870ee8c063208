"""A version's tools over MCP at `<openenv base>/mcp`, in the two ways clients speak to it:

- MCP's streamable HTTP transport (JSON responses), for MCP clients: each MCP session is a studio
  episode; `initialize` opens it (task and seed from the URL's `?task_id=`/`?seed=` query, else with
  `?curriculum=STRATEGY` the sampler's pick for the agent (`?agent=NAME`, else `mcp`), else chosen by the
  seed as over OpenEnv; its id is the `Mcp-Session-Id`), `tools/call` is a step
  ({"tool": name, "arguments": {...}}), the call that ends the episode verifies it, DELETE closes it.
- openenv-core's JSON-RPC (no `initialize`, no session header; runs/protocols/jsonrpc.py), as its
  MCPToolClient in production mode sends it: `openenv/session/create` opens an episode whose id is
  the `session_id` later calls name in their params, `openenv/session/close` closes it; a call
  naming no session is an episode of its own (opened, stepped, closed). Always HTTP 200.

Same credentials as the OpenEnv routes.
"""
import json
import logging
from urllib.parse import parse_qs

from runs.episodes import interactive
from studio.errors import DomainError
from studio.revocation import revocation_unwatch, revocation_watch

from . import driver, jsonrpc, spaces, wire
from .keys import AccessRefused
from .openenv import access_of, dumps, http_episode, read_body, respond

logger = logging.getLogger(__name__)

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SESSION_HEADER = b"mcp-session-id"
MCP_AGENT_NAME = "mcp"  # the agent of MCP sessions whose base URL names none (`?agent=`)
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return value.decode("latin-1")
    return None


def _error(request_id, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _result(request_id, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


async def serve_mcp(scope, receive, send, match) -> None:
    method = scope["method"]
    if method not in ("POST", "DELETE"):
        # No server-initiated stream: the transport allows answering GET with 405.
        return await respond(send, 405, {"detail": "Method Not Allowed"}, headers=[(b"allow", b"POST, DELETE")])
    body = await read_body(receive)
    if body is None:
        return await respond(send, 413, _error(None, INVALID_REQUEST, "The request body is too large."))
    try:
        access = await access_of(scope, match)
    except (AccessRefused, DomainError) as refused:
        return await respond(send, refused.status, _error(None, INVALID_REQUEST, str(refused)))
    session_id = _header(scope, SESSION_HEADER)
    if method == "POST" and session_id is None:
        return await _serve_openenv(access, scope, send, body)
    if session_id and not await driver.in_thread(driver.episode_belongs, access, session_id):
        return await respond(send, 404, _error(None, INVALID_REQUEST, f"No open MCP session {session_id} of {access.version.label}."))
    if method == "DELETE":
        if session_id:
            await driver.in_thread(_close, access, session_id)
        return await respond(send, 200, {})
    try:
        message = json.loads(body)
    except ValueError as exc:
        return await respond(send, 400, _error(None, PARSE_ERROR, f"Parse error: {exc}"))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        return await respond(send, 400, _error(None, INVALID_REQUEST, "Send one JSON-RPC 2.0 message (an object with jsonrpc and method)."))
    request_id = message.get("id")
    if "id" not in message:  # a notification: nothing to answer
        return await _accepted(send)
    name, params = message["method"], message.get("params") or {}
    if not isinstance(params, dict):
        return await respond(send, 400, _error(request_id, INVALID_PARAMS, "params must be an object"))
    if name == "initialize":
        status, reply, headers = await _initialize(access, scope, request_id, params)
        return await respond(send, status, reply, headers=headers)
    if name == "ping":
        return await respond(send, 200, _result(request_id, {}))
    if name not in ("tools/list", "tools/call"):
        return await respond(send, 200, _error(request_id, METHOD_NOT_FOUND, f"Method not found: {name}"))
    if name == "tools/list":
        found = await driver.in_thread(spaces.version_spaces, version=access.version)
        tools = [{"name": t["name"], "description": t["description"], "inputSchema": t["parameters"]}
                 for t in spaces.tool_list(found["tools"])]
        return await respond(send, 200, _result(request_id, {"tools": tools}))
    status, reply = await _call_tool(access, session_id, request_id, params)
    return await respond(send, status, reply)


async def _serve_openenv(access, scope, send, body: bytes) -> None:
    """A request without an MCP session: MCP's `initialize` (and its notifications, `ping`) go the
    transport's way, everything else is openenv-core's JSON-RPC."""
    try:
        message = json.loads(body)
    except ValueError:
        return await respond(send, 200, jsonrpc.error(jsonrpc.PARSE_ERROR))
    notification = str(message.get("method") or "").startswith("notifications/") if isinstance(message, dict) else False
    if isinstance(message, dict) and (message.get("method") in ("initialize", "ping") or notification):
        if notification:
            return await _accepted(send)
        if message["method"] == "ping":
            return await respond(send, 200, _result(message.get("id"), {}))
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        status, reply, headers = await _initialize(access, scope, message.get("id"), params)
        return await respond(send, status, reply, headers=headers)
    problem = jsonrpc.request_problem(message)
    if problem:
        return await respond(send, 200, jsonrpc.error(jsonrpc.INVALID_REQUEST, problem))
    await respond(send, 200, await jsonrpc.answer(message, HttpPeer(access)))


class HttpPeer:
    """openenv-core's HTTP MCP sessions (jsonrpc.McpPeer): a session is an episode of the `mcp` agent
    (or the base URL's `?agent=`), its task the base URL's curriculum's pick when it names one."""

    def __init__(self, access):
        self.access = access

    async def _episode(self, session_id: str) -> driver.ProtocolEpisode:
        if not await driver.in_thread(driver.episode_belongs, self.access, session_id):
            raise jsonrpc.SessionUnknown(session_id)
        return await driver.in_thread(http_episode, self.access, session_id)

    async def tools(self, session_id):
        if session_id:
            episode = await self._episode(session_id)
            listed = spaces.tool_list(episode.tools)
        else:
            listed = spaces.tool_list((await driver.in_thread(spaces.version_spaces, version=self.access.version))["tools"])
        return listed or None

    async def call(self, session_id, name: str, arguments: dict) -> dict:
        opened = session_id is None
        if opened:  # as openenv-core's stateless call: an episode for this call alone
            task_id, seed = driver.reset_arguments(version=self.access.version, data={})
            episode = await driver.in_thread(driver.reset_open, self.access, data={}, task_id=task_id, seed=seed,
                                             default_agent=MCP_AGENT_NAME)
        else:
            episode = await self._episode(session_id)
        try:
            step = await driver.episode_step(self.access, episode, {"tool": name, "arguments": arguments})
        finally:
            if opened or episode.done:
                await driver.in_thread(_close, self.access, episode.episode_id)
        return wire.call_result(step, episode=episode)

    async def create(self) -> str:
        task_id, seed = driver.reset_arguments(version=self.access.version, data={})
        episode = await driver.in_thread(driver.reset_open, self.access, data={}, task_id=task_id, seed=seed,
                                         default_agent=MCP_AGENT_NAME)
        _watch_session(self.access, episode.episode_id)
        return episode.episode_id

    async def close(self, session_id: str) -> None:
        if not await driver.in_thread(driver.episode_belongs, self.access, session_id):
            raise jsonrpc.SessionUnknown(session_id)
        await driver.in_thread(_close, self.access, session_id)


async def _accepted(send) -> None:
    await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _initialize(access, scope, request_id, params: dict):
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    arguments = {}
    if "task_id" in query:
        arguments["task_id"] = query["task_id"][0]
    if "seed" in query:
        seed = query["seed"][0]
        arguments["seed"] = int(seed) if seed.isdigit() else seed
    # (`?agent=` and `?curriculum=` are the access's: the base URL's query, checked as it was resolved)
    try:
        task_id, seed = driver.reset_arguments(version=access.version, data=arguments)
    except driver.ResetInvalid as exc:
        return 400, _error(request_id, INVALID_PARAMS, exc.errors[0]["msg"]), []
    if spaces.gymnasium_id_of(access.version) is not None:
        return 400, _error(request_id, INVALID_REQUEST, f"{access.version.label} has no tools to serve over MCP."), []
    try:
        episode = await driver.in_thread(driver.reset_open, access, data=arguments, task_id=task_id, seed=seed,
                                         default_agent=MCP_AGENT_NAME)
    except DomainError as exc:
        return exc.status, _error(request_id, INVALID_REQUEST, exc.message), []
    if not episode.tools:
        await driver.in_thread(driver.episode_close, access, episode)
        return 400, _error(request_id, INVALID_REQUEST, f"{access.version.label} has no tools to serve over MCP."), []
    requested = params.get("protocolVersion")
    result = {
        "protocolVersion": requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[1],
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": f"environment-studio {access.version.label}", "version": str(access.version.number)},
        # What the agent is asked, as the first observation: an MCP client has no reset to read it from.
        "instructions": dumps({"task_id": episode.task_id, "seed": seed, "rollout_id": episode.rollout_id,
                               "observation": episode.observation}),
    }
    _watch_session(access, episode.episode_id)
    return 200, _result(request_id, result), [(SESSION_HEADER, episode.episode_id.encode())]


# Open MCP sessions of this process -> their revocation watch: revoking the credential (or removing the
# member) closes the session's episode at once (studio/revocation.py); its next request is refused.
_session_watches: dict[str, int] = {}


def _watch_session(access, session_id: str) -> None:
    async def revoked(code: int, reason: str) -> None:
        logger.info("mcp: closing session %s: %s", session_id, reason)
        await driver.in_thread(_close, access, session_id)

    _session_watches[session_id] = revocation_watch(tags=access.tags, callback=revoked)


async def _call_tool(access, session_id: str, request_id, params: dict):
    name, arguments = params.get("name"), params.get("arguments") or {}
    found = await driver.in_thread(spaces.version_spaces, version=access.version)
    if name not in {t["name"] for t in spaces.tool_list(found["tools"])}:
        return 200, _error(request_id, INVALID_PARAMS, f"Unknown tool: {name!r}")
    spec = next(spec for spec in spaces.tool_list(found["tools"]) if spec["name"] == name)
    problem = wire.tool_arguments_problem(spec, arguments) if isinstance(arguments, dict) else "arguments must be an object"
    if problem:
        return 200, _error(request_id, INVALID_PARAMS, f"Invalid arguments for {name}: {problem}")
    action = {"tool": name, "arguments": arguments}
    try:
        step = await interactive.episode_step_remote_async(team=access.team, episode_id=session_id, action=action)
    except interactive.EpisodeNotFound:
        return 404, _error(request_id, INVALID_REQUEST, "Session terminated: the episode is closed (or never opened).")
    except DomainError as exc:
        return 200, _result(request_id, {"content": [{"type": "text", "text": exc.message}], "isError": True})
    structured = {key: step.get(key) for key in ("observation", "reward", "terminated", "truncated", "info")}
    if step.get("terminated") or step.get("truncated"):
        # The episode is over: verify it now (an MCP client may never send DELETE).
        await driver.in_thread(_close, access, session_id)
    is_error = isinstance(step.get("info"), dict) and step["info"].get("valid") is False
    return 200, _result(request_id, {"content": [{"type": "text", "text": dumps(step.get("observation"))}],
                                     "structuredContent": structured, "isError": is_error})


def _close(access, session_id: str) -> None:
    revocation_unwatch(_session_watches.pop(session_id, None))
    try:
        interactive.episode_close(team=access.team, episode_id=session_id)
    except interactive.EpisodeNotFound:
        pass
