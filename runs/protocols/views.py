"""The version page's "Training loops" card: your OpenEnv base URL for the version (its key shown,
revocable), the WebSocket and MCP URLs beside it. The same URLs as the API's (runs/protocols/api.py)."""
from django.shortcuts import render
from django.views.decorators.http import require_POST

from environments.selectors import environment_get, version_get
from studio.access import team_view

from . import keys
from .api import openenv_urls


def _card(request, slug: str, number: int, *, revoke: bool):
    version = version_get(environment=environment_get(team=request.team, slug=slug), number=number)
    if revoke:
        keys.openenv_key_revoke(team=request.team, actor=request.user, version=version)
    key = keys.openenv_key_get_or_create(team=request.team, actor=request.user, version=version)
    urls = openenv_urls(origin=request.build_absolute_uri("/"), version=version, key=key)
    return render(request, "protocols/_openenv.html", {"urls": urls, "version": version, "env": version.environment, "revoked": revoke})


@require_POST
@team_view("run")
def openenv_show(request, slug: str, number: int):
    return _card(request, slug, number, revoke=False)


@require_POST
@team_view("run")
def openenv_revoke(request, slug: str, number: int):
    return _card(request, slug, number, revoke=True)
