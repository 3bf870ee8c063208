"""The ASGI router of the protocol routes: under /openenv/, the OpenEnv websocket and HTTP routes
(runs/protocols/openenv.py) and MCP at `/mcp` (runs/protocols/mcp.py); everything else goes on."""
from . import mcp, openenv


class ProtocolRoutes:
    """ASGI: requests under /openenv/ are served here, everything else goes on to `app`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or not scope["path"].startswith(openenv.PREFIX):
            return await self.app(scope, receive, send)
        scope = openenv.base_query_moved(scope)
        match = openenv.PATH.match(scope["path"])
        rest = (match["rest"] or "/") if match else None
        if scope["type"] == "websocket":
            if match is None or rest.rstrip("/") not in ("/ws", "/mcp"):
                return await openenv.websocket_not_found(scope, receive, send)
            if rest.rstrip("/") == "/mcp":
                return await openenv.websocket_not_found(scope, receive, send, "MCP is served over streamable HTTP at this path, not a websocket.")
            return await openenv.OpenEnvSession(scope, receive, send, match).run()
        if match is None:
            return await openenv.respond(send, 404, {"detail": "Not Found"})
        if rest.rstrip("/") == "/mcp":
            return await mcp.serve_mcp(scope, receive, send, match)
        return await openenv.serve_http(scope, receive, send, match, rest.rstrip("/") or "/")
