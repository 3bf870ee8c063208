"""Websocket routes of every app. Each route also takes an API token (`studio/ws_auth.py`)."""
from django.urls import path

from runs.consumers import RolloutConsumer, RunConsumer
from studio.ws_auth import TokenAuthMiddleware

websocket_urlpatterns = [
    path("ws/rollouts/<int:rollout_id>/", TokenAuthMiddleware(RolloutConsumer.as_asgi())),
    path("ws/runs/<int:run_id>/", TokenAuthMiddleware(RunConsumer.as_asgi())),
]
