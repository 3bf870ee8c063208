"""The one emitter of live rollout events: channel-layer group sends to `rollout-<id>` and `run-<id>`.

Messages (what consumers receive; `type` maps to a consumer method with dots as underscores):
    {"type": "rollout.steps", "rollout_id": 7, "run_id": 3, "steps": [{index, action, observation, ...}]}
    {"type": "rollout.status", "rollout_id": 7, "run_id": 3, "status": "running", ..., "row": "<tr ...>"}
    {"type": "run.status", "run_id": 3, "status": "finished"}   (run group only)
Steps travel in batches (the engine flushes every ~0.2 s): one publish per batch and group, not per
step, so streaming costs a round trip per batch. A failing channel layer is logged, never raised:
streaming must never break a rollout.
"""
import asyncio
import logging
import os
import threading

from channels.layers import get_channel_layer

from .artifacts import artifact_url, arrays_public

logger = logging.getLogger(__name__)


def rollout_group(rollout_id: int) -> str:
    return f"rollout-{rollout_id}"


def run_group(run_id: int) -> str:
    return f"run-{run_id}"


def publish_step(rollout, step: dict) -> None:
    publish_steps(rollout, [step])


def publish_steps(rollout, steps: list[dict]) -> None:
    if not steps:
        return
    _send(rollout, {"type": "rollout.steps", "rollout_id": rollout.pk, "run_id": rollout.run_id, "steps": steps})


def publish_steps_many(batches: list[tuple[object, list[dict]]]) -> None:
    """Publish several rollouts' step batches in one round on the publish loop (an episode host's flush)."""
    messages = []
    for rollout, steps in batches:
        if steps:
            message = {"type": "rollout.steps", "rollout_id": rollout.pk, "run_id": rollout.run_id, "steps": steps}
            messages.append(((rollout_group(rollout.pk), run_group(rollout.run_id)), message))
    if not messages:
        return
    try:
        layer = get_channel_layer()
        if layer is not None:
            _publish_loop.run(_send_many(layer, messages), timeout=30.0)
    except Exception:  # noqa: BLE001 - a broken channel layer must not end an episode
        logger.warning("could not publish %s step batches", len(messages), exc_info=True)


async def _send_many(layer, messages):
    for groups, message in messages:
        for group in groups:
            await layer.group_send(group, message)


# A step as every viewer gets it (websocket, replay windows, REST): the API's StepOut shape.
STEP_FIELDS = ("index", "action", "observation", "reward", "terminated", "truncated", "info", "elapsed_ms")


def step_json(step: dict, *, rollout_id: int) -> dict:
    """The viewer's shape of a published step dict or a DB row (whose `artifact` is a storage path);
    stored arrays of the observation get their URLs."""
    out = {field: step.get(field) for field in STEP_FIELDS}
    out["observation"] = arrays_public(out["observation"], rollout_id=rollout_id)
    artifact = step.get("artifact")
    out["artifact_url"] = artifact_url(str(artifact)) if artifact else None
    return out


def rollout_status(rollout) -> dict:
    """A rollout's live state, as status messages carry it."""
    return {
        "rollout_id": rollout.pk,
        "run_id": rollout.run_id,
        "task_id": rollout.task_id,
        "seed": rollout.seed,
        "status": rollout.status,
        "step_count": rollout.step_count,
        "total_reward": rollout.total_reward,
        "verifier_reward": rollout.verifier_reward,
        "verifier_reason": rollout.verifier_reason,
        "error": rollout.error,
        "end_reason": rollout.end_reason,
    }


def rollout_row_html(rollout) -> str:
    """The rollout's row of the run page, rendered from the template a reload uses."""
    from django.template.loader import render_to_string

    from studio.models import Team

    if type(rollout).team.is_cached(rollout):  # a worker loads its rollout with its team: no query per status
        team_slug = rollout.team.slug
    else:
        team_slug = Team.objects.values_list("slug", flat=True).get(pk=rollout.team_id)
    return render_to_string("runs/_rollout_row.html", {"r": rollout, "team_slug": team_slug})


def publish_rollout(rollout) -> None:
    try:
        row = rollout_row_html(rollout)
    except Exception:  # noqa: BLE001 - a viewer's row must not end a rollout; the page reconciles on reconnect
        logger.warning("could not render the row of rollout %s", rollout.pk, exc_info=True)
        row = None
    _send(rollout, {"type": "rollout.status", **rollout_status(rollout), "row": row})


def publish_run(run) -> None:
    """A run's status changed (finished, cancelled): its viewers fetch fresh figures."""
    _send_groups((run_group(run.pk),), {"type": "run.status", "run_id": run.pk, "status": run.status}, what=f"run {run.pk}")


async def _group_send_all(layer, groups, message):
    for group in groups:
        await layer.group_send(group, message)


class _PublishLoop:
    """One event loop per process, on a daemon thread, that every publish runs on.

    `async_to_sync` from a worker thread makes a new loop, and so a new Redis connection, per call
    (~9 ms a group send, measured); on a loop that stays up the connection stays open (~0.4 ms).
    Created lazily and again after a fork (Celery's prefork children), since a loop thread does not
    survive one.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None

    def run(self, coroutine, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop()).result(timeout)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                self._loop, self._pid = asyncio.new_event_loop(), os.getpid()
                threading.Thread(target=self._loop.run_forever, name="events-publish", daemon=True).start()
            return self._loop


_publish_loop = _PublishLoop()


def _send(rollout, message: dict) -> None:
    _send_groups((rollout_group(rollout.pk), run_group(rollout.run_id)), message, what=f"rollout {rollout.pk}")


def _send_groups(groups, message: dict, *, what: str) -> None:
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        _publish_loop.run(_group_send_all(layer, groups, message))
    except Exception:  # noqa: BLE001 - a broken channel layer must not end a rollout
        logger.warning("could not publish %s for %s", message.get("type"), what, exc_info=True)
