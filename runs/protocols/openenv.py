"""OpenEnv's wire protocol for every environment version, under /openenv/<team>/<slug>@<n>/ (with
`/k/<key>` after it when the credential rides in the URL): the WebSocket session at `/ws` (reset,
step, state, mcp, close; replies `observation`, `state`, `mcp`, `error` with OpenEnv's error codes),
HTTP `/reset`, `/step`, `/state`, `/schema`, `/metadata`, `/health`, `/openapi.json`, `/docs`,
`/redoc`, and MCP at `/mcp` (runs/protocols/mcp.py).

Status codes and JSON shapes are openenv-core 0.3.0's `create_app` over the same environment
(env_server/http_server.py; payloads built in runs/protocols/wire.py, MCP in jsonrpc.py);
tests/protocols/test_openenv_parity.py replays one message sequence against both. Served straight from
ASGI like the session step routes, so a step is one Redis round trip to the episode host. Over
HTTP, which OpenEnv keeps stateless, the studio's episode id travels in the observation and is sent
back with `/step`, `/state` and `/close`.
"""
import json
import logging
import re
from urllib.parse import parse_qs

from pydantic import ValidationError

from runs.models import Rollout
from runs.quality.selectors import latest_audit
from studio.errors import DomainError
from studio.revocation import revocation_unwatch, revocation_watch

from runs.episodes import interactive
from runs.sessions.fast_path import MAX_BODY_BYTES, read_body

from . import driver, jsonrpc, messages, openapi, spaces, wire
from .keys import AccessRefused, access_resolve

logger = logging.getLogger(__name__)

PREFIX = "/openenv/"
PATH = re.compile(
    r"^/openenv/(?P<team>[a-z0-9][a-z0-9-]*)/(?P<label>[a-z0-9][a-z0-9-]*@[0-9]+)(?:/k/(?P<key>[^/]+))?(?P<rest>/.*)?$"
)
MAX_MESSAGE_BYTES = 25 * 1024 * 1024
# A client that appends its routes to a base URL with a query (`.../k/KEY?agent=a` + `/ws`, as
# openenv-core's clients do) sends the route inside the query: `?agent=a/ws`. Names in the query never hold '/'.
APPENDED_ROUTE = re.compile(r"^(?P<query>[^/]*)(?P<route>/(?:ws|reset|step|state|close|schema|metadata|health|mcp|docs|redoc"
                            r"|openapi\.json))/?(?:\?(?P<more>.*))?$")
HTTP_ROUTES = {("GET", "/health"), ("GET", "/metadata"), ("GET", "/schema"), ("GET", "/state"), ("POST", "/reset"),
               ("POST", "/step"), ("POST", "/close"), ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc")}

# OpenEnv's websocket error codes (types.WSErrorCode).
INVALID_JSON, UNKNOWN_TYPE, VALIDATION_ERROR = "INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR"
EXECUTION_ERROR, CAPACITY_REACHED, FACTORY_ERROR, SESSION_ERROR = "EXECUTION_ERROR", "CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"


# -- credentials ------------------------------------------------------------------------------------


def bearer_of(scope) -> str | None:
    for name, value in scope.get("headers") or []:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def base_query_moved(scope) -> dict:
    """The scope with a route that rode in the base URL's query (APPENDED_ROUTE) put back on the path,
    so `.../k/KEY?agent=a&curriculum=learnable` works as a base URL; the scope itself otherwise."""
    query = scope.get("query_string", b"").decode("latin-1")
    moved = APPENDED_ROUTE.match(query) if "/" in query else None
    if moved is None:
        return scope
    rest = "&".join(part for part in (moved["query"], moved["more"]) if part)
    return {**scope, "path": scope["path"].rstrip("/") + moved["route"], "query_string": rest.encode("latin-1")}


def url_choices(scope) -> dict:
    """What the base URL's query asks of its episodes: {"agent": NAME, "curriculum": STRATEGY}, each or none."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    return {name: query[name][0] for name in ("agent", "curriculum") if name in query}


async def access_of(scope, match):
    return await driver.in_thread(access_resolve, team_slug=match["team"], label=match["label"], key=match["key"],
                                  bearer=bearer_of(scope), **url_choices(scope))


# -- the websocket session ---------------------------------------------------------------------------


class OpenEnvSession:
    """One OpenEnv client connection: at most one open episode at a time, closed (verified) on the
    next reset, on `close`, or when the connection drops."""

    def __init__(self, scope, receive, send, match):
        self.scope, self.receive, self.send, self.match = scope, receive, send, match
        self.access = None
        self.closed = False
        self.episode: driver.ProtocolEpisode | None = None

    async def run(self) -> None:
        message = await self.receive()
        if message["type"] != "websocket.connect":
            return
        await self.send({"type": "websocket.accept"})
        try:
            self.access = await access_of(self.scope, self.match)
        except (AccessRefused, DomainError) as refused:
            # Said in OpenEnv's error shape, so the client shows the reason, then closed.
            await self._error(str(refused), SESSION_ERROR)
            await self.send({"type": "websocket.close", "code": {401: 4401, 403: 4403, 404: 4404}.get(refused.status, 4400)})
            return
        watch = revocation_watch(tags=self.access.tags, callback=self._revoked)
        try:
            await self._serve()
        finally:
            revocation_unwatch(watch)
            await self._close_episode()

    async def _revoked(self, code: int, reason: str) -> None:
        """The credential was revoked (studio/revocation.py): say why in OpenEnv's error shape, close."""
        if self.closed:
            return
        try:
            await self._error(reason, SESSION_ERROR)
            self.closed = True  # nothing more is sent, a step answered meanwhile included
            await self.send({"type": "websocket.close", "code": code, "reason": reason})
        except Exception:  # noqa: BLE001 - the client may have gone at the same moment
            logger.debug("could not close a revoked OpenEnv session", exc_info=True)

    async def _serve(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["type"] != "websocket.receive" or self.closed:
                continue
            raw = message.get("text")
            if raw is None:
                raw = (message.get("bytes") or b"").decode("utf-8", "replace")
            if len(raw) > MAX_MESSAGE_BYTES:
                await self._error(f"The message is over {MAX_MESSAGE_BYTES} bytes.", VALIDATION_ERROR)
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                await self._error(f"Invalid JSON: {exc}", INVALID_JSON)
                continue
            if not isinstance(data, dict):
                # (openenv-core ends the session here with a SESSION_ERROR; the studio says what is wrong and stays)
                await self._error("Invalid message", VALIDATION_ERROR, errors=[{"type": "dict_type", "loc": [], "msg": "Input should be a valid dictionary", "input": data}])
                continue
            kind = data.get("type", "")
            handler = {"reset": self._reset, "step": self._step, "state": self._state, "mcp": self._mcp, "close": None}.get(kind, "unknown")
            if handler == "unknown":
                await self._error(f"Unknown message type: {kind}", UNKNOWN_TYPE)
                continue
            if not messages.plainly_valid(kind, data):
                try:
                    messages.parse(kind, data)
                except ValidationError as exc:
                    await self._error("Invalid message", VALIDATION_ERROR, errors=messages.errors_of(exc))
                    continue
            if handler is None:  # close: end the episode, then the connection (as OpenEnv's server does)
                await self._close_episode()
                self.closed = True
                await self.send({"type": "websocket.close", "code": 1000})
                return
            await handler(data)

    async def _reset(self, data: dict) -> None:
        await self._close_episode()
        try:
            task_id, seed = driver.reset_arguments(version=self.access.version, data=data.get("data") or {})
        except driver.ResetInvalid as exc:
            return await self._error("Invalid message", VALIDATION_ERROR, errors=exc.errors)
        try:
            self.episode = await self._open(data=data.get("data") or {}, task_id=task_id, seed=seed)
        except DomainError as exc:
            code = {429: CAPACITY_REACHED, 409: FACTORY_ERROR, 400: VALIDATION_ERROR}.get(exc.status, SESSION_ERROR)
            return await self._error(exc.message, code)
        await self._reply("observation", wire.reset_payload(self.episode, info=self.episode.reset_info))

    async def _open(self, *, data: dict | None = None, task_id: str | None = None, seed: int | None = None) -> driver.ProtocolEpisode:
        if task_id is None:
            task_id, seed = driver.reset_arguments(version=self.access.version, data={})
        return await driver.in_thread(driver.reset_open, self.access, data=data or {}, task_id=task_id, seed=seed)

    async def _step(self, data: dict) -> None:
        if self.episode is None:
            return await self._error("No episode is open: send `reset` first (a `close` ends the episode).", EXECUTION_ERROR)
        try:
            parsed = wire.action_parse(self.episode.form, data["data"])
        except wire.ActionInvalid as exc:
            return await self._error("Invalid message", VALIDATION_ERROR, errors=exc.errors)
        try:
            payload = await act(self.access, self.episode, parsed)
        except DomainError as exc:
            return await self._error(exc.message, EXECUTION_ERROR)
        await self._reply("observation", payload)

    async def _state(self, data: dict) -> None:
        await self._reply("state", await state_of(self.access, self.episode))

    async def _mcp(self, data: dict) -> None:
        request = data["data"]
        problem = jsonrpc.request_problem(request)
        if problem:
            return await self._reply("mcp", jsonrpc.error(jsonrpc.INVALID_REQUEST, problem))
        await self._reply("mcp", await jsonrpc.answer(request, SessionPeer(self)))

    async def _close_episode(self) -> None:
        episode, self.episode = self.episode, None
        if episode is None:
            return
        try:
            await driver.in_thread(driver.episode_close, self.access, episode)
        except DomainError as exc:
            logger.warning("openenv: closing episode %s: %s", episode.episode_id, exc.message)

    async def _reply(self, kind: str, data: dict) -> None:
        if self.closed:
            return
        await self.send({"type": "websocket.send", "text": dumps({"type": kind, "data": data})})

    async def _error(self, message: str, code: str, **extra) -> None:
        await self._reply("error", {"message": message, "code": code, **extra})


class SessionPeer:
    """MCP calls of a websocket session (jsonrpc.McpPeer): tools are its episode's, a call is a step
    of it (opened as a reset with no arguments would be, if none is open yet, as tools need no reset)."""

    def __init__(self, session: OpenEnvSession):
        self.session = session

    async def _episode(self) -> driver.ProtocolEpisode:
        if self.session.episode is None:
            self.session.episode = await self.session._open()
        return self.session.episode

    async def tools(self, session_id):
        form = (await self._episode()).form  # what the episode's environment reported
        return list(form.tools) if form.kind == "tools" else None

    async def call(self, session_id, name: str, arguments: dict) -> dict:
        episode = await self._episode()
        step = await driver.episode_step(self.session.access, episode, {"tool": name, "arguments": arguments})
        return wire.call_result(step, episode=episode)

    async def create(self) -> str:
        return (await self._episode()).episode_id

    async def close(self, session_id: str) -> None:
        if self.session.episode is not None and session_id == self.session.episode.episode_id:
            raise jsonrpc.SessionRefused("Cannot close active WebSocket-managed session via MCP method")
        raise jsonrpc.SessionUnknown(session_id)


async def act(access, episode: driver.ProtocolEpisode, parsed: tuple) -> dict:
    """The observation reply to a parsed action (wire.action_parse): a step of the episode, or for
    MCP's actions a tool list or a tool call (an unknown tool or bad arguments never reach it)."""
    kind, value = parsed
    tools = list(episode.form.tools) if episode.form is not None else []
    if kind == "list":
        return wire.list_tools_payload(tools, facts=wire.facts_of(episode, step=episode.step_count))
    if kind == "call":
        name, arguments = value
        spec = next((spec for spec in tools if spec["name"] == name), None)
        facts = wire.facts_of(episode, step=episode.step_count)
        if spec is None:
            return wire.tool_error_payload(name, "tool_not_found", f"Unknown tool: {name!r}", facts=facts)
        problem = wire.tool_arguments_problem(spec, arguments)
        if problem:
            return wire.tool_error_payload(name, "invalid_args", f"Invalid arguments for {name}: {problem}", facts=facts)
        step = await driver.episode_step(access, episode, {"tool": name, "arguments": arguments})
        return wire.call_tool_payload(episode, name, step)
    step = await driver.episode_step(access, episode, value)
    return wire.step_payload(episode, step)


async def state_of(access, episode: driver.ProtocolEpisode | None) -> dict:
    """OpenEnv's State of an episode: its environment's own state() as its host holds it."""
    if episode is None:
        return wire.state_payload(None, None, version_label=access.version.label)
    try:
        seen = await driver.in_thread(interactive.episode_observe, team=access.team, episode_id=episode.episode_id)
    except DomainError:  # its host let it go (ended, idle): what this connection knows of it
        seen = {"done": True}
    return wire.state_payload(episode, seen, version_label=access.version.label)


async def websocket_not_found(scope, receive, send, detail: str = "Not Found") -> None:
    """An unknown websocket path: HTTP 404 where the server can answer the handshake so, else close 4404."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = dumps({"detail": detail}).encode()
        await send({"type": "websocket.http.response.start", "status": 404,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.close", "code": 4404})


# -- HTTP -------------------------------------------------------------------------------------------


async def serve_http(scope, receive, send, match, route: str) -> None:
    method = scope["method"]
    if (method, route) not in HTTP_ROUTES:
        known = {path for _, path in HTTP_ROUTES} | {"/mcp"}
        return await respond(send, 405 if route in known else 404, {"detail": "Method Not Allowed" if route in known else "Not Found"})
    if route == "/health":
        return await respond(send, 200, {"status": "healthy"})
    body = await read_body(receive)
    if body is None:
        return await respond(send, 413, {"detail": f"The request body is over {MAX_BODY_BYTES} bytes."})
    try:
        access = await access_of(scope, match)
    except (AccessRefused, DomainError) as refused:
        return await respond(send, refused.status, {"detail": str(refused)})
    if route in PAGES:
        base_path = scope["path"][: len(scope["path"]) - len(match["rest"] or "")]
        return await respond_html(send, PAGES[route](openapi_url=f"{base_path}/openapi.json"))
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    try:
        status, payload = await HTTP_HANDLERS[route](access, body, query, scope=scope, match=match)
    except HttpRefused as refused:
        status, payload = refused.status, {"detail": refused.detail}
    except DomainError as exc:
        status, payload = exc.status, {"detail": exc.message}
    await respond(send, status, payload)


class HttpRefused(Exception):
    def __init__(self, status: int, detail):
        super().__init__(str(detail))
        self.status, self.detail = status, detail


def _json_body(body: bytes, *, default: dict | None = None) -> dict:
    """The JSON object of a request body, or FastAPI's 422 for the same body."""
    if not body.strip():
        if default is not None:
            return default
        raise HttpRefused(422, [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}])
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise HttpRefused(422, [{"type": "json_invalid", "loc": ["body", getattr(exc, "pos", 0)], "msg": "JSON decode error",
                                 "input": {}, "ctx": {"error": getattr(exc, "msg", str(exc))}}]) from None
    if not isinstance(data, dict):
        raise HttpRefused(422, [{"type": "model_attributes_type", "loc": ["body"],
                                 "msg": "Input should be a valid dictionary or object to extract fields from", "input": data}])
    return data


def _episode_id(data: dict) -> str:
    episode_id = data.get("episode_id")
    if not isinstance(episode_id, str) or not episode_id:
        # HTTP keeps no session: a step names its episode (openenv-core's stateless step has none to name).
        raise HttpRefused(422, [{"type": "missing" if episode_id is None else "string_type", "loc": ["body", "episode_id"],
                                 "msg": "Field required" if episode_id is None else "Input should be a valid string",
                                 "input": data if episode_id is None else episode_id}])
    return episode_id


async def _http_reset(access, body, query, **_):
    data = _json_body(body, default={})
    try:
        request = messages.ResetRequest.model_validate(data)
    except ValidationError as exc:
        raise HttpRefused(422, messages.errors_of(exc, prefix=["body"], url=False)) from None
    # OpenEnv's `episode_id` names an episode of the caller's choosing; the studio makes its own.
    arguments = {key: value for key, value in request.model_dump(exclude_unset=True).items()
                 if key in ("seed", "task_id", "curriculum", "agent")}
    try:
        task_id, seed = driver.reset_arguments(version=access.version, data=arguments)
    except driver.ResetInvalid as exc:
        raise HttpRefused(422, [{**error, "loc": ["body", *error["loc"][1:]]} for error in exc.errors]) from None
    try:
        episode = await driver.in_thread(driver.reset_open, access, data=arguments, task_id=task_id, seed=seed)
    except DomainError as exc:
        if exc.status != 400:
            raise
        raise HttpRefused(exc.status, [{"type": "value_error", "loc": ["body", exc.field or "curriculum"], "msg": exc.message}]) from None
    return 200, wire.reset_payload(episode, info=episode.reset_info)


async def _http_step(access, body, query, **_):
    data = _json_body(body)
    try:
        request = messages.StepRequest.model_validate(data)
    except ValidationError as exc:
        raise HttpRefused(422, messages.errors_of(exc, prefix=["body"], url=False)) from None
    form = await driver.in_thread(driver.action_form_of, version=access.version)
    try:
        parsed = wire.action_parse(form, request.action)
    except wire.ActionInvalid as exc:
        raise HttpRefused(422, exc.errors) from None  # as openenv-core: the action model's own errors
    episode = await driver.in_thread(http_episode, access, _episode_id(data))
    episode.form = form
    reply = await act(access, episode, parsed)
    if reply["done"]:  # no close message over HTTP: the episode's end verifies and ends the rollout
        await driver.in_thread(driver.episode_close, access, episode)
    return 200, reply


def http_episode(access, episode_id: str) -> driver.ProtocolEpisode:
    """An open episode of this version named by its id (steps need its rollout's facts)."""
    seen = interactive.episode_observe(team=access.team, episode_id=episode_id)
    rollout = Rollout.objects.filter(pk=seen["rollout_id"], run__environment_version=access.version).first()
    if rollout is None:
        raise HttpRefused(404, f"Episode {episode_id} is not an episode of {access.version.label}.")
    return driver.ProtocolEpisode(
        episode_id=episode_id, rollout_id=rollout.pk, task_id=rollout.task_id, seed=rollout.seed,
        version_label=access.version.label, observation=seen.get("observation"), step_count=seen.get("step_count") or 0,
        done=bool(seen.get("done")), tools=seen.get("tools") or [],
    )


async def _http_state(access, body, query, **_):
    episode_id = (query.get("episode_id") or [None])[0]
    episode = await driver.in_thread(http_episode, access, episode_id) if episode_id else None
    return 200, await state_of(access, episode)


async def _http_close(access, body, query, **_):
    episode_id = _episode_id(_json_body(body))
    episode = await driver.in_thread(http_episode, access, episode_id)
    rollout = await driver.in_thread(driver.episode_close, access, episode)
    return 200, {"episode_id": episode_id, "closed": True, "rollout_id": episode.rollout_id,
                 "status": getattr(rollout, "status", None)}


async def _http_schema(access, body, query, **_):
    found = await driver.in_thread(spaces.version_spaces, version=access.version)
    return 200, spaces.openenv_schemas(found)


async def _http_metadata(access, body, query, **_):
    return 200, await driver.in_thread(metadata_of, access.version)


async def _http_openapi(access, body, query, *, scope, match):
    found = await driver.in_thread(spaces.version_spaces, version=access.version)
    base_path = scope["path"][: len(scope["path"]) - len(match["rest"] or "")]
    return 200, openapi.openapi_document(version=access.version, schemas=spaces.openenv_schemas(found), base_path=base_path)


def metadata_of(version) -> dict:
    """OpenEnv's EnvironmentMetadata for a version."""
    environment = version.environment
    readme = (version.files or {}).get("README.md") if isinstance(version.files, dict) else None
    description = environment.description or f"{version.label} on Environment Studio"
    # OpenEnv's EnvironmentMetadata forbids extra fields: the audit's one word rides in the description.
    audit = latest_audit(version=version)
    if audit is not None:
        description = f"{description.rstrip()} Quality audit: {audit.status} (audit {audit.pk})."
    return {
        "name": environment.name or environment.slug,
        "description": description,
        "readme_content": readme if isinstance(readme, str) else None,
        "version": str(version.number),
        "author": getattr(version.author, "username", None) if version.author_id else None,
        "documentation_url": None,
    }


HTTP_HANDLERS = {"/reset": _http_reset, "/step": _http_step, "/state": _http_state, "/close": _http_close,
                 "/schema": _http_schema, "/metadata": _http_metadata, "/openapi.json": _http_openapi}
PAGES = {"/docs": openapi.docs_page, "/redoc": openapi.redoc_page}


# -- plumbing ---------------------------------------------------------------------------------------


def dumps(payload) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str)


async def respond_html(send, page: str) -> None:
    body = page.encode("utf-8")
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def respond(send, status: int, payload, headers: list | None = None) -> None:
    body = dumps(payload).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
