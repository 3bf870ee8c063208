"""ASGI entry point: HTTP pages and API through Django, websockets through Channels."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
django_asgi_app = get_asgi_application()

from channels.generic.websocket import WebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from runs.protocols.routes import ProtocolRoutes  # noqa: E402
from runs.sessions.fast_path import SessionStepFastPath  # noqa: E402
from studio.routing import websocket_urlpatterns  # noqa: E402
from studio.ws_auth import ProgramOriginValidator, SessionUnlessToken  # noqa: E402


class UnknownPathConsumer(WebsocketConsumer):
    """Any websocket path no app routes: accepted only to close with 4404, as consumers refuse an
    unknown object (Channels' router would raise, and the server answer the handshake with a 500)."""

    def connect(self):
        self.accept()
        self.close(code=4404)


application = ProtocolTypeRouter(
    {
        # Remote sessions' step routes skip Django's request cycle (same auth, services and shapes).
        # OpenEnv and MCP under /openenv/ (runs/protocols): their own credentials, shapes and errors.
        "http": ProtocolRoutes(SessionStepFastPath(django_asgi_app)),
        # Browsers must come from an allowed host; programs (no Origin header) authenticate with a token.
        "websocket": ProtocolRoutes(ProgramOriginValidator(
            SessionUnlessToken(URLRouter([*websocket_urlpatterns, re_path(r"", UnknownPathConsumer.as_asgi())]))
        )),
    }
)
