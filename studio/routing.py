"""Websocket routes of every app. Each route also takes an API token (`studio/ws_auth.py`, checked by the consumers)."""
from django.urls import path

from runs.consumers import RolloutConsumer, RunConsumer

websocket_urlpatterns = [
    path("ws/rollouts/<int:rollout_id>/", RolloutConsumer.as_asgi()),
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
]
