"""Who is on the other end of a websocket: an API token (programs) or the session user (pages).

`TokenAuthMiddleware` sits inside Channels' `AuthMiddlewareStack` (`SessionUnlessToken`): a token in `?token=es_...` or an
`Authorization: Bearer es_...` header wins over the session; a token that is given but not valid
(unknown, revoked, its user gone from the team) leaves an anonymous user, never the session's, so a
script with a dead token is refused instead of quietly acting as whoever's cookie came along.
It sets `scope["user"]`, and `scope["api_token"]` (None for session users): a token reaches only
its own team's objects, as in the REST API.

`ProgramOriginValidator` is `AllowedHostsOriginValidator` that also lets a handshake without an
`Origin` header through. Browsers always send Origin, so cross-site websocket hijacking (a foreign
page riding the victim's session cookie) is still refused; programs send no Origin and carry no
cookie, only a token.
"""
from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import OriginValidator
from django.conf import settings
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


class TokenAuthMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        scope = dict(scope)
        scope.setdefault("api_token", None)
        raw = raw_token_from_scope(scope)
        if raw is not None:
            token = await database_sync_to_async(token_authenticate)(raw)
            scope["api_token"] = token
            scope["user"] = token.user if token is not None else AnonymousUser()
        return await self.app(scope, receive, send)


class SessionUnlessToken:
    """Channels' session and user lookup (`AuthMiddlewareStack`, a database hop) only for connections
    without a token: a token connection's user comes from its token alone (`TokenAuthMiddleware`),
    so it skips the lookup (one hop less per program viewer; 200 of them joining at once queue their
    hops on one thread)."""

    def __init__(self, inner):
        self.inner, self.with_session = inner, AuthMiddlewareStack(inner)

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
