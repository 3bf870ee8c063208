"""Play mode URLs; studio/urls.py mounts them under t/<team>/ with namespace "play"."""
from django.urls import path

from . import play_views

app_name = "play"
urlpatterns = [
    path("play/", play_views.play_new, name="new"),
    path("play/start/", play_views.play_start, name="start"),
    path("play/<str:play_id>/", play_views.play_page, name="play"),
    path("play/<str:play_id>/act/", play_views.play_act, name="act"),
    path("play/<str:play_id>/finish/", play_views.play_finish, name="finish"),
]
