"""REST endpoints of the protocols: a version's OpenEnv base URL (with its scoped key) and its spaces."""
from typing import Any

from ninja import Field, Router, Schema

from environments.selectors import environment_get, version_get
from studio.auth import require

from . import keys, spaces

router = Router(tags=["protocols"])


class OpenEnvOut(Schema):
    base_url: str
    base_url_without_key: str
    key_hint: str
    version: str
    websocket_url: str
    mcp_url: str
    schema_url: str


class SpacesOut(Schema):
    version: str
    task_ids: list[str]
    eval_task_ids: list[str] = Field([], description="the held-out tasks (split = eval): measured, never practised")
    action_space: Any = None
    observation_space: Any = None
    action_schema: Any = None
    tools: list[dict] = []


def openenv_urls(*, origin: str, version, key) -> dict:
    """The URLs a client is given, one definition for the API and the version page."""
    base = origin.rstrip("/") + keys.openenv_base_path(version=version, key=key)
    ws_base = "ws" + base[len("http"):] if base.startswith("http") else base
    return {
        "base_url": base, "base_url_without_key": origin.rstrip("/") + keys.openenv_base_path(version=version),
        "key_hint": keys.key_raw(key)[:8], "version": version.label, "websocket_url": f"{ws_base}/ws",
        "mcp_url": f"{base}/mcp", "schema_url": f"{base}/schema",
    }


def _version(request, slug: str, number: int):
    return version_get(environment=environment_get(team=request.team, slug=slug), number=number, content=True)


@router.get("/environments/{slug}/versions/{number}/openenv", response=OpenEnvOut)
def openenv_base_url(request, slug: str, number: int):
    """The OpenEnv base URL of this version for you: it carries a key that opens, steps and closes
    this version's episodes as you (nothing else), until you revoke it. The same URL every call."""
    require(request, "run")
    version = _version(request, slug, number)
    key = keys.openenv_key_get_or_create(team=request.team, actor=request.user, version=version)
    return openenv_urls(origin=request.build_absolute_uri("/"), version=version, key=key)


@router.post("/environments/{slug}/versions/{number}/openenv/revoke", response=OpenEnvOut)
def openenv_key_revoke(request, slug: str, number: int):
    """Revoke your key for this version (its URL stops working within seconds) and get a new one."""
    require(request, "run")
    version = _version(request, slug, number)
    keys.openenv_key_revoke(team=request.team, actor=request.user, version=version)
    key = keys.openenv_key_get_or_create(team=request.team, actor=request.user, version=version)
    return openenv_urls(origin=request.build_absolute_uri("/"), version=version, key=key)


@router.get("/environments/{slug}/versions/{number}/spaces", response=SpacesOut)
def version_spaces(request, slug: str, number: int, task_id: str | None = None):
    """The action and observation spaces (Gymnasium-style descriptions) and tools clients build on."""
    version = _version(request, slug, number)
    found = spaces.version_spaces(version=version, task_id=task_id)
    training = set(spaces.training_task_ids_of(version))
    every = spaces.task_ids_of(version)
    return {"version": version.label, "task_ids": every, "eval_task_ids": [i for i in every if i not in training], **found}
