"""Websocket routes of every app."""
websocket_urlpatterns = []
