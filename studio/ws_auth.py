"""Who is on the other end of a websocket: an API token (programs) or the session user (pages).

`scope_caller` finds the caller: a token in `?token=es_...` or an `Authorization: Bearer es_...`
header wins over the session; a token that is given but not valid (unknown, revoked, its user gone
from the team) means nobody, never the session's user, so a script with a dead token is refused
instead of quietly acting as whoever's cookie came along. It gives (user, api_token), api_token None
for session users: a token reaches only its own team's objects, as in the REST API. Consumers call
it in the same database hop as their access check (one hop per handshake).

`ProgramOriginValidator` is `AllowedHostsOriginValidator` that also lets a handshake without an
`Origin` header through. Browsers always send Origin, so cross-site websocket hijacking (a foreign
page riding the victim's session cookie) is still refused; programs send no Origin and carry no
cookie, only a token.
"""
from types import SimpleNamespace
from urllib.parse import parse_qs

from channels.sessions import SessionMiddlewareStack
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser

from .services import token_authenticate


def raw_token_from_scope(scope) -> str | None:
    """The raw token of the handshake, from the query string or the Authorization header."""
    query = parse_qs(scope.get("query_string", b"").decode("latin1"))
    if query.get("token"):
        return query["token"][0]
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, raw = value.decode("latin1").partition(" ")
            if scheme.lower() == "bearer" and raw.strip():
                return raw.strip()
    return None


def scope_caller(scope) -> tuple | None:
    """(user, api_token) of a websocket connection, or None when nobody valid is on the other end.
    Synchronous (one query for a token): consumers call it in the same database hop as their access
    check. A token that is given but not valid never falls back to the session's user."""
    raw = raw_token_from_scope(scope)
    if raw is not None:
        token = token_authenticate(raw)
        return (token.user, token) if token is not None else None
    if "session" in scope:
        # Django's own check of a session's user (its auth hash included), as for a page request.
        user = auth.get_user(SimpleNamespace(session=scope["session"]))
    else:
        user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None
    return user, None


class SessionUnlessToken:
    """The session cookie's session (Channels' SessionMiddlewareStack, read lazily) only for connections
    without a token: a token connection's user comes from its token alone. Either way the user is found
    by `scope_caller` in the consumer's one database hop, on the read threads (studio/db_threads.py),
    not in a hop of its own on Channels' one database thread (1,000 viewers joining at once queued there)."""

    def __init__(self, inner):
        self.inner, self.with_session = inner, SessionMiddlewareStack(inner)

    async def __call__(self, scope, receive, send):
        if raw_token_from_scope(scope) is not None:
            return await self.inner(dict(scope, user=AnonymousUser()), receive, send)
        return await self.with_session(scope, receive, send)


class ProgramOriginValidator(OriginValidator):
    def __init__(self, application):
        allowed = settings.ALLOWED_HOSTS if not settings.DEBUG or settings.ALLOWED_HOSTS else ["localhost", "127.0.0.1", "[::1]"]
        super().__init__(application, allowed)

    def valid_origin(self, parsed_origin):
        if parsed_origin is None:
            return True
        return self.validate_origin(parsed_origin)
