"""The two step routes of remote sessions served straight from ASGI, beside Django.

A training loop's step is the studio's hottest request: through Django's request cycle, middleware
and ninja it cost ~4 ms of a ~4.5 ms round trip. Here the same routes (`POST /api/v1/sessions/{id}/step`
and `POST /api/v1/sessions/step`, documented in OpenAPI by runs/sessions/api.py) take the same
token (the same cached authentication), call the same services, and answer the same JSON shapes and
errors; every other request goes to Django unchanged.
"""
import json
import re
import types
from concurrent.futures import ThreadPoolExecutor

from pydantic import ValidationError

from studio.db_threads import in_pool
from studio.errors import DomainError
from studio.inputs import InputProblem, json_parse

from ..episodes import interactive
from . import services
from .api import step_auth
from .schemas import ActionIn, BatchStepIn, SessionStepOut

PREFIX = "/api/v1/sessions/"
ONE_STEP = re.compile(r"^/api/v1/sessions/(?P<session_id>[^/]+)/step/?$")
MAX_BODY_BYTES = 25 * 1024 * 1024
STEP_FIELDS = tuple(SessionStepOut.model_fields)

_pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="session-step")


class _Refused(Exception):
    def __init__(self, status: int, body: dict):
        super().__init__(body.get("detail"))
        self.status, self.body = status, body


class SessionStepFastPath:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith(PREFIX):
            return await self.app(scope, receive, send)
        path = scope["path"]
        match = ONE_STEP.match(path)
        if match is None and path.rstrip("/") != "/api/v1/sessions/step":
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        headers = dict(scope.get("headers") or [])
        try:
            if body is None:
                raise _Refused(413, {"detail": f"The request body is over {MAX_BODY_BYTES} bytes."})
            if match is not None:
                status, payload = 200, await _one_step(headers, body, match.group("session_id"))
            else:
                status, payload = 200, await _in_thread(_batch, headers, body)
        except _Refused as refused:
            status, payload = refused.status, refused.body
        await _respond(send, status, payload)


async def _in_thread(function, *args):
    # Only a token check or a batch touches the database; the connection is handed back after each.
    return await in_pool(_pool, function, *args)


async def _one_step(headers: dict, body: bytes, session_id: str) -> dict:
    """A single step awaited on the event loop (no thread), once the token is known."""
    request = _cached_request(headers)
    if request is None:
        request = await _in_thread(_authenticated, headers)
    action = _parsed(body, ActionIn).action
    try:
        step = await interactive.episode_step_remote_async(team=request.team, episode_id=session_id, action=action)
    except DomainError as exc:
        raise _Refused(exc.status, _error_body(exc)) from None
    return {name: step.get(name) for name in STEP_FIELDS}


def _batch(headers: dict, body: bytes) -> dict:
    request = _authenticated(headers)
    payload = _parsed(body, BatchStepIn)
    try:
        items = [(item.session_id, item.action) for item in payload.steps]
        return {"results": services.session_steps(team=request.team, items=items)}
    except DomainError as exc:
        raise _Refused(exc.status, _error_body(exc)) from None


def strict_json(body: bytes):
    """The body as JSON every later stage (the host, the sandbox, PostgreSQL's jsonb) keeps unchanged,
    or a 400 naming what is wrong (studio/inputs.py: the rules every request gate shares)."""
    try:
        return json_parse(body or b"{}")
    except InputProblem as exc:
        raise _Refused(400, {"detail": f"The body is refused: {exc}", **({"field": exc.field} if exc.field else {})}) from None
    except ValueError as exc:
        raise _Refused(400, {"detail": f"The body is not JSON: {exc}"}) from None


def _parsed(body: bytes, schema):
    data = strict_json(body)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ())) or None
        raise _Refused(422, {"detail": f"{field or 'input'}: {first.get('msg')}", "field": field}) from None


def _error_body(exc: DomainError) -> dict:
    return {"detail": exc.message, **({"field": exc.field} if exc.field else {})}


def _token(headers: dict) -> str | None:
    scheme, _, token = (headers.get(b"authorization") or b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _permitted(request):
    if not request.membership.can("run"):
        raise _Refused(403, {"detail": f"Your role ({request.membership.role}) cannot do this."})
    return request


def _cached_request(headers: dict):
    token, request = _token(headers), types.SimpleNamespace()
    if token is None or step_auth.cached(request, token) is None:
        return None
    return _permitted(request)


def _authenticated(headers: dict):
    token, request = _token(headers), types.SimpleNamespace()
    if token is None or step_auth.authenticate(request, token) is None:
        raise _Refused(401, {"detail": "Missing or invalid token. Send `Authorization: Bearer <token>`."})
    return _permitted(request)


async def read_body(receive) -> bytes | None:
    """An ASGI request's whole body; b"" when the client left, None past MAX_BODY_BYTES."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send, status: int, payload: dict) -> None:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
