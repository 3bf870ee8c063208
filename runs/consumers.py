"""Websocket consumers that follow a rollout or a run: authenticate, subscribe, forward.

The events come from `runs/events.py` (the one emitter). No viewer has a channel of its own: the
process's fan-out (`runs/fanout.py`) follows each run and rollout once for all of its viewers. The
rollout consumer follows its rollout before it reads the stored steps, so every step is either stored
by then or arrives live; live events wait in its inbox until connect is done (the backlog is out),
then are handled one at a time. It remembers the last index it sent, drops live steps at or below it
and fetches from the database any it missed, so a viewer sees each index once, in order. Its stored
steps come from the rollout's shared backlog (`runs/backlog.py`).

Close codes (after accepting, so the code reaches the client): 4401 not authenticated (no session,
bad or revoked token), 4404 no such rollout or run in your teams (another team's looks the same),
4400 a malformed query string; 4503 the live stream broke (the channel layer's Redis is down or
restarted, `runs/stream_watch.py`), after a `{"type": "stream", "status": "lost"}` message: reconnect
(with `after=` your last index) and you get what you missed from the database.
"""
import asyncio
import logging
import time
from functools import partial
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from studio.db_threads import read_async
from studio.ws_auth import scope_caller
from studio.revocation import member_tag, revocation_unwatch, revocation_watch, token_tag

from . import events, selectors
from .backlog import RolloutBacklog, backlog_join, backlog_leave, first_steps_first, steps_text
from .fanout import RunViewer, event_text, rollout_fanout, run_fanout
from .models import FINISHED_ROLLOUT_STATUSES, RolloutStatus
from .stream_watch import CLOSE_STREAM_LOST, stream_watch

logger = logging.getLogger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


_NOBODY = object()


def _authorized(scope, lookup):
    caller = scope_caller(scope)
    if caller is None:
        return _NOBODY
    user, api_token = caller
    found = lookup(user=user, api_token=api_token)
    return None if found is None else (found, caller)


def _credential_tags(found, caller) -> list[str]:
    """What the viewer stands on (studio/revocation.py): its membership of the object's team, and its token."""
    user, api_token = caller
    tags = [member_tag(team_id=found.team_id, user_id=user.pk)]
    if api_token is not None:
        tags.append(token_tag(api_token.pk))
    return tags


class _TeamScopedConsumer(AsyncJsonWebsocketConsumer):
    """Accepts, then refuses with a close code unless the user may see the object. No channel of its
    own: live events come through the process's fan-out (`runs/fanout.py`)."""

    channel_layer_alias = None
    accepted = False
    revocation = None

    async def accept(self, *args, **kwargs):
        self.accepted = True
        await super().accept(*args, **kwargs)

    async def dispatch(self, message):
        # Channels' dispatch first hops to the one thread-sensitive sync thread to close stale
        # database connections, for every message: with 100 viewers that single thread becomes the
        # bottleneck (seconds of lag measured in bench_streaming). Every database call here goes
        # through studio.db_threads.read_async, which closes stale connections itself, so skip the hop.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def follow(self, fanout, key: int, viewer) -> bool:
        """Follow the group of `key` through the process's fan-out, and the watch on its Redis; False
        (after closing with CLOSE_STREAM_LOST) when the channel layer cannot be reached."""
        try:
            await fanout.join(key, viewer)
        except Exception:  # noqa: BLE001 - Redis down: the viewer is told to come back, not shown a server error
            logger.warning("could not follow %s", fanout.group_of(key), exc_info=True)
            await self.stream_lost()
            return False
        stream_watch().add(self)
        return True

    async def stream_lost(self) -> None:
        """The live stream broke (Redis down or restarted): say so, and close so the viewer reconnects."""
        try:
            if not self.accepted:
                await self.accept()
            await self.send_json({"type": "stream", "status": "lost"})
            await self.close(code=CLOSE_STREAM_LOST)
        except Exception:  # noqa: BLE001 - the viewer may be gone already
            logger.debug("could not tell a viewer its stream was lost", exc_info=True)

    async def authorized(self, lookup):
        """`lookup(user=, api_token=)` for the connection's caller, with the caller found in the
        same database hop (studio.ws_auth.scope_caller); None after refusing when nobody valid is logged
        in (4401) or the lookup finds nothing (4404)."""
        found = await read_async(_authorized, self.scope, lookup)
        if found is _NOBODY:
            await self.refuse(CLOSE_UNAUTHENTICATED)
            return None
        if found is None:
            await self.refuse(CLOSE_NOT_FOUND)
            return None
        found, caller = found
        self.revocation = revocation_watch(tags=_credential_tags(found, caller), callback=self.revoked)
        return found

    async def revoked(self, code: int, reason: str) -> None:
        """The viewer's token was revoked or its member removed: close with the code and the reason."""
        revocation_unwatch(self.revocation)
        try:
            if not self.accepted:
                await self.accept()
            await self.close(code=code, reason=reason)
        except Exception:  # noqa: BLE001 - the viewer may be gone already
            logger.debug("could not close a revoked viewer", exc_info=True)

    async def websocket_disconnect(self, message):
        revocation_unwatch(self.revocation)
        await super().websocket_disconnect(message)

    def query_param(self, name: str) -> str | None:
        values = parse_qs(self.scope.get("query_string", b"").decode("latin1")).get(name)
        return values[0] if values else None


class RolloutConsumer(_TeamScopedConsumer):
    """`ws/rollouts/<id>/?after=<index>[&backlog=0]`: stored steps after `after`, a status, then live.

    The stored steps come from the rollout's shared backlog (`runs/backlog.py`): read and encoded once
    per process for all the viewers who join, whatever their number. Live events come through the
    process's rollout fan-out into this viewer's inbox, handled one at a time once connect is done."""

    rollout_id: int | None = None
    backlog: RolloutBacklog | None = None
    owed_first = False  # counted in first_steps_first() until its first chunk is out
    following = False
    pump: asyncio.Task | None = None
    finished = False
    last_index = -1
    catch_up = True

    async def connect(self):
        first_steps_first().begin()
        self.owed_first = True
        try:
            await self._connect()
        finally:
            self.first_sent()

    def first_sent(self) -> None:
        if self.owed_first:
            self.owed_first = False
            first_steps_first().done()

    async def _connect(self):
        try:
            self.last_index = int(self.query_param("after") or -1)
            self.catch_up = (self.query_param("backlog") or "1") not in ("0", "false", "no")
        except ValueError:
            await self.refuse(CLOSE_BAD_REQUEST)
            return
        rollout_id = self.scope["url_route"]["kwargs"]["rollout_id"]
        rollout = await self.authorized(partial(selectors.rollout_status_for_reader, rollout_id=rollout_id))
        if rollout is None:
            return
        self.rollout_id = rollout_id
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.backlog = backlog_join(rollout_id)
        # A rollout finished before we subscribe sends nothing live: its stored steps are all there is.
        self.finished = rollout.status in FINISHED_ROLLOUT_STATUSES
        await self.accept()
        # Subscribe first, read second: a step committed after the read is published after it too.
        if not await self.follow(rollout_fanout(), rollout_id, self):
            return
        self.following = True
        if self.catch_up:
            await self.send_stored_steps()
        if not self.finished:
            rollout = await read_async(partial(selectors.rollout_status_for_reader, rollout_id=rollout_id))
            if rollout is None:  # deleted meanwhile (its run was)
                await self.close(code=CLOSE_NOT_FOUND)
                return
            await self.send_stored_steps(upto=rollout.step_count - 1)
        await self.send_json({"type": "status", **events.rollout_status(rollout)})
        self.pump = asyncio.ensure_future(self._pump())

    async def disconnect(self, code):
        self.first_sent()
        stream_watch().discard(self)
        if self.pump is not None:
            self.pump.cancel()
            self.pump = None
        if self.following:
            self.following = False
            await rollout_fanout().leave(self.rollout_id, self)
        if self.backlog is not None:
            backlog_leave(self.backlog)
            self.backlog = None

    def deliver(self, event: dict) -> None:
        """An event of the rollout, from the fan-out: handled in order after connect (`_pump`)."""
        self.inbox.put_nowait(event)

    async def _pump(self) -> None:
        while True:
            event = await self.inbox.get()
            try:
                if event["type"] == "rollout.steps":
                    await self.rollout_steps(event)
                elif event["type"] == "rollout.status":
                    await self.rollout_status(event)
            except Exception:  # noqa: BLE001 - this viewer's stream is broken, not the process
                logger.exception("could not send rollout %s's %s to a viewer", self.rollout_id, event["type"])
                await self.close(code=1011)
                return

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
            self.first_sent()
            if not frame.full or (upto is not None and self.last_index >= upto):
                return
            # Other viewers' handshakes and first chunks go before this one's next chunk.
            await first_steps_first().wait_turn()

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

    viewer: RunViewer | None = None

    async def connect(self):
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        batch = (self.query_param("batch") or "0") in ("1", "true", "yes")
        if not await self.authorized(partial(selectors.run_team_for_reader, run_id=run_id)):
            return
        # Subscribe before reading the summary, so no status change falls between the two; the
        # summary is read once for all the viewers whose subscription was in place before the read
        # began (a read begun while this one's was still being made could miss a change it never gets).
        self.viewer = RunViewer(run_id=run_id, send=self.send_text, batch=batch)
        if not await self.follow(run_fanout(), run_id, self.viewer):
            self.viewer = None
            return
        joined_at = time.monotonic()
        summary = await run_fanout().summary_text(run_id, joined_at)
        await self.accept()
        await self.send(text_data=summary)
        self.viewer.start()

    async def disconnect(self, code):
        stream_watch().discard(self)
        if self.viewer is not None:
            viewer, self.viewer = self.viewer, None
            await run_fanout().leave(viewer.run_id, viewer)

    async def receive_json(self, content, **kwargs):
        """Viewers only listen; anything they send is ignored."""

    async def send_text(self, text: str) -> None:
        await self.send(text_data=text)
