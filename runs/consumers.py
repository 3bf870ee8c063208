"""Websocket consumers that follow a rollout or a run: authenticate, subscribe, forward.

The events come from `runs/events.py` (the one emitter). The rollout consumer joins its group before
it reads the stored steps, so every step is either stored by then or arrives live; it remembers the
last index it sent, drops live steps at or below it and fetches from the database any it missed,
so a viewer sees each index once, in order. Channels hands a consumer one message at a time, and
`connect` is one of them: live messages wait in the queue until the backlog is out. Its stored steps
come from the rollout's shared backlog (`runs/backlog.py`). Run viewers have no channel of their own:
the process's fan-out (`runs/fanout.py`) follows each run once for all of them.

Close codes (after accepting, so the code reaches the client): 4401 not authenticated (no session,
bad or revoked token), 4404 no such rollout or run in your teams (another team's looks the same),
4400 a malformed query string; 4503 the live stream broke (the channel layer's Redis is down or
restarted, `runs/stream_watch.py`), after a `{"type": "stream", "status": "lost"}` message: reconnect
(with `after=` your last index) and you get what you missed from the database.
"""
import logging
import time
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from studio.models import Membership

from . import events
from .backlog import CHUNK, RolloutBacklog, backlog_join, backlog_leave, steps_text
from .fanout import RunViewer, event_text, run_fanout
from .models import FINISHED_ROLLOUT_STATUSES, Rollout, RolloutStatus, Run
from .stream_watch import CLOSE_STREAM_LOST, stream_watch

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


def _team_ids(user, api_token):
    """The caller's teams (a token's: its own team only)."""
    if api_token is not None:
        return [api_token.team_id]
    return Membership.objects.filter(user=user).values("team_id")


def _visible(model, pk: int, user, api_token) -> bool:
    return model.objects.filter(pk=pk, team_id__in=_team_ids(user, api_token)).exists()


def _visible_rollout(rollout_id: int, user, api_token) -> Rollout | None:
    """The rollout if it is in one of the caller's teams (one database hop for check and read)."""
    return Rollout.objects.filter(pk=rollout_id, team_id__in=_team_ids(user, api_token)).first()


class _TeamScopedConsumer(AsyncJsonWebsocketConsumer):
    """Accepts, then refuses with a close code unless the user may see the object."""

    group: str | None = None
    accepted = False

    async def accept(self, *args, **kwargs):
        self.accepted = True
        await super().accept(*args, **kwargs)

    async def dispatch(self, message):
        # Channels' dispatch first hops to the one thread-sensitive sync thread to close stale
        # database connections, for every message: with 100 viewers that single thread becomes the
        # bottleneck (seconds of lag measured in bench_streaming). Every database call here goes
        # through database_sync_to_async, which closes stale connections itself, so skip the hop.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def subscribe(self, group: str) -> bool:
        """Join the group and the watch on its Redis; False (after closing with CLOSE_STREAM_LOST)
        when the channel layer cannot be reached."""
        try:
            await self.channel_layer.group_add(group, self.channel_name)
        except Exception:  # noqa: BLE001 - Redis down: the viewer is told to come back, not shown a server error
            logger.warning("could not subscribe to %s", group, exc_info=True)
            await self.stream_lost()
            return False
        self.group = group
        stream_watch().add(self)
        return True

    async def unsubscribe(self) -> None:
        stream_watch().discard(self)
        if self.group is not None:
            group, self.group = self.group, None
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # noqa: BLE001 - Redis down: its subscriptions went with it
                logger.warning("could not leave %s", group, exc_info=True)

    async def stream_lost(self) -> None:
        """The live stream broke (Redis down or restarted): say so, and close so the viewer reconnects."""
        try:
            if not self.accepted:
                await self.accept()
            await self.send_json({"type": "stream", "status": "lost"})
            await self.close(code=CLOSE_STREAM_LOST)
        except Exception:  # noqa: BLE001 - the viewer may be gone already
            logger.debug("could not tell a viewer its stream was lost", exc_info=True)

    async def caller(self) -> tuple | None:
        """(user, api_token) of the connection, or None (after refusing) when nobody is logged in."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(CLOSE_UNAUTHENTICATED)
            return None
        return user, self.scope.get("api_token")

    def query_param(self, name: str) -> str | None:
        values = parse_qs(self.scope.get("query_string", b"").decode("latin1")).get(name)
        return values[0] if values else None


class RolloutConsumer(_TeamScopedConsumer):
    """`ws/rollouts/<id>/?after=<index>[&backlog=0]`: stored steps after `after`, a status, then live.

    The stored steps come from the rollout's shared backlog (`runs/backlog.py`): read and encoded once
    per process for all the viewers who join, whatever their number."""

    rollout_id: int | None = None
    backlog: RolloutBacklog | None = None
    finished = False
    last_index = -1
    catch_up = True

    async def connect(self):
        try:
            self.last_index = int(self.query_param("after") or -1)
            self.catch_up = (self.query_param("backlog") or "1") not in ("0", "false", "no")
        except ValueError:
            await self.refuse(CLOSE_BAD_REQUEST)
            return
        caller = await self.caller()
        if caller is None:
            return
        rollout_id = self.scope["url_route"]["kwargs"]["rollout_id"]
        rollout = await database_sync_to_async(_visible_rollout)(rollout_id, *caller)
        if rollout is None:
            await self.refuse(CLOSE_NOT_FOUND)
            return
        self.rollout_id = rollout_id
        self.backlog = backlog_join(rollout_id)
        # A rollout finished before we subscribe sends nothing live: its stored steps are all there is.
        self.finished = rollout.status in FINISHED_ROLLOUT_STATUSES
        await self.accept()
        # Subscribe first, read second: a step committed after the read is published after it too.
        if not await self.subscribe(events.rollout_group(rollout_id)):
            return
        if self.catch_up:
            await self.send_stored_steps()
        if not self.finished:
            rollout = await database_sync_to_async(Rollout.objects.get)(pk=rollout_id)
            await self.send_stored_steps(upto=rollout.step_count - 1)
        await self.send_json({"type": "status", **events.rollout_status(rollout)})

    async def disconnect(self, code):
        await self.unsubscribe()
        if self.backlog is not None:
            backlog_leave(self.backlog)
            self.backlog = None

    async def receive_json(self, content, **kwargs):
        """Viewers only listen; anything they send is ignored."""

    async def send_stored_steps(self, upto: int | None = None) -> None:
        """Send stored steps after the last sent one (up to index `upto` when given), in chunks."""
        if not self.catch_up or (upto is not None and upto <= self.last_index):
            return
        while True:
            frame = await self.backlog.frame_after(self.last_index, finished=self.finished)
            if frame is None:
                return
            await self.send(text_data=frame.text)
            self.last_index = frame.last_index
            if frame.count < CHUNK or (upto is not None and self.last_index >= upto):
                return

    async def rollout_steps(self, event):
        steps = event["steps"]
        if steps[0]["index"] != self.last_index + 1 or any(b["index"] != a["index"] + 1 for a, b in zip(steps, steps[1:])):
            steps = sorted((s for s in steps if s["index"] > self.last_index), key=lambda s: s["index"])
            if not steps:
                return
            if steps[0]["index"] > self.last_index + 1:
                # Missed some (subscribed a moment late, or a publish was lost): they are stored by now.
                await self.send_stored_steps(upto=steps[0]["index"] - 1)
                steps = [s for s in steps if s["index"] > self.last_index]
                if not steps:
                    return
            await self.send(text_data=steps_text(self.rollout_id, steps))
        else:
            # The usual case: the batch follows on; every viewer gets the same text, encoded once.
            await self.send(text_data=event_text(event))
        self.last_index = steps[-1]["index"]

    async def rollout_status(self, event):
        if event["status"] == RolloutStatus.RUNNING and event["step_count"] == 0:
            # A redelivered task starts the episode again from step 0 (its partial steps were deleted).
            self.last_index = -1
            self.backlog.forget()
        await self.send_stored_steps(upto=event["step_count"] - 1)
        await self.send(text_data=event_text(event))


class RunConsumer(_TeamScopedConsumer):
    """`ws/runs/<id>/[?batch=1]`: a run summary, then every rollout's status and steps, and fresh
    summaries. Events come through the process's fan-out (`runs/fanout.py`), not a channel of each
    viewer's own; `batch=1` (the run page) takes what arrives together as one `batch` message."""

    channel_layer_alias = None  # no channel of its own: the fan-out's one channel serves every viewer
    viewer: RunViewer | None = None

    async def connect(self):
        caller = await self.caller()
        if caller is None:
            return
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        batch = (self.query_param("batch") or "0") in ("1", "true", "yes")
        if not await database_sync_to_async(_visible)(Run, run_id, *caller):
            await self.refuse(CLOSE_NOT_FOUND)
            return
        # Subscribe before reading the summary, so no status change falls between the two; the
        # summary is read once for all the viewers who joined before the read began.
        self.viewer = RunViewer(run_id=run_id, send=self.send_text, batch=batch)
        joined_at = time.monotonic()
        if not await self.subscribe(events.run_group(run_id)):
            self.viewer = None
            return
        summary = await run_fanout().summary_text(run_id, joined_at)
        await self.accept()
        await self.send(text_data=summary)
        self.viewer.start()

    async def subscribe(self, group: str) -> bool:
        try:
            await run_fanout().join(self.viewer)
        except Exception:  # noqa: BLE001 - Redis down: the viewer is told to come back, not shown a server error
            logger.warning("could not subscribe to %s", group, exc_info=True)
            await self.stream_lost()
            return False
        stream_watch().add(self)
        return True

    async def unsubscribe(self) -> None:
        stream_watch().discard(self)
        if self.viewer is not None:
            viewer, self.viewer = self.viewer, None
            await run_fanout().leave(viewer)

    async def disconnect(self, code):
        await self.unsubscribe()

    async def receive_json(self, content, **kwargs):
        """Viewers only listen; anything they send is ignored."""

    async def send_text(self, text: str) -> None:
        await self.send(text_data=text)
