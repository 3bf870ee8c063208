"""ASGI entry point: HTTP pages and API through Django, websockets through Channels."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from runs.sessions.fast_path import SessionStepFastPath  # noqa: E402
from studio.routing import websocket_urlpatterns  # noqa: E402
from studio.ws_auth import ProgramOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Remote sessions' step routes skip Django's request cycle (same auth, services and shapes).
        "http": SessionStepFastPath(django_asgi_app),
        # Browsers must come from an allowed host; programs (no Origin header) authenticate with a token.
        "websocket": ProgramOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
