"""Live events to every viewer of a run or a rollout in this web process: one subscription per run or
rollout, one decode per event, however many viewers.

With a channel-layer subscription per viewer, each event was decoded, dispatched and sent once per
viewer, and 1,000 viewers of a run fell tens of seconds behind; each viewer's subscribing and leaving
were Redis commands of its own (bench/bench_viewers.py). Here one channel of the process joins the
groups its viewers follow (one channel for runs, one for rollouts).

Run viewers: each event becomes text once and is appended to each viewer's outbox; a viewer's writer
sends what its outbox holds, at most every BATCH_EVERY_S with many viewers (less with few:
BATCH_FULL_AT; the first event after a quiet spell at once). A viewer that asked for batches
(`?batch=1`, the run page) gets everything waiting as one `{"type": "batch", "messages": [...]}` frame,
others one frame per message. Rollout viewers get each event through their `deliver` (the consumer
keeps its own order and fills gaps from the database), and the text of a batch that follows on is
encoded once for all of them (`event_text`).
"""
import asyncio
import json
import logging
import time
import weakref

from channels.layers import get_channel_layer

from studio.db_threads import read_async

from . import events, figures
from .backlog import steps_text
from .models import FINISHED_ROLLOUT_STATUSES, Run

logger = logging.getLogger(__name__)

BATCH_EVERY_S = 0.2
# The spacing grows with the run's viewers in this process, full from this many on: a lone viewer
# gets each event at once, a thousand get a frame each every BATCH_EVERY_S.
BATCH_FULL_AT = 100
SUMMARY_EVERY_S = 0.5


# -- every viewer gets the same text for the same event ----------------------------------------------

_encoded: dict[tuple, str] = {}
_ENCODED_KEEP = 512


def event_text(event: dict) -> str:
    """A `rollout.steps` or `rollout.status` event as viewers get it, encoded once per process."""
    if event["type"] == "rollout.steps":
        steps = event["steps"]
        # Timings tell a retried attempt's steps from the first one's with the same indexes.
        key = ("steps", event["rollout_id"], *((s["index"], s.get("elapsed_ms")) for s in steps))
        encode = lambda: steps_text(event["rollout_id"], steps)  # noqa: E731
    else:
        key = ("status", *(repr(event.get(k)) for k in sorted(event)))
        encode = lambda: json.dumps({"type": "status", **{k: v for k, v in event.items() if k != "type"}})  # noqa: E731
    text = _encoded.get(key)
    if text is None:
        if len(_encoded) >= _ENCODED_KEEP:
            _encoded.pop(next(iter(_encoded)))
        text = _encoded[key] = encode()
    return text


def run_summary_message(run_id: int) -> dict:
    run = Run.objects.select_related("environment_version").get(pk=run_id)
    return figures.run_summary_message(run)


# -- one process's viewers of runs ---------------------------------------------------------------------

class RunViewer:
    """What the fan-out needs of a viewer: an outbox, a writer and throttled summaries."""

    def __init__(self, *, run_id: int, send, batch: bool):
        self.run_id, self.send, self.batch = run_id, send, batch
        self.outbox: list[str] = []
        self.wake = asyncio.Event()
        self.sent_at = 0.0
        self.spacing = BATCH_EVERY_S
        self.writer: asyncio.Task | None = None
        self.summary_sent_at = time.monotonic()
        self.summary_wanted = 0.0
        self.summary_task: asyncio.Task | None = None

    def push(self, text: str) -> None:
        self.outbox.append(text)
        self.wake.set()

    def start(self) -> None:
        """Start sending (after the first summary): what arrived since joining goes first."""
        self.writer = asyncio.ensure_future(self._write())

    def stop(self) -> None:
        for task in (self.writer, self.summary_task):
            if task is not None:
                task.cancel()

    async def _write(self) -> None:
        while True:
            await self.wake.wait()
            wait = self.sent_at + self.spacing - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.wake.clear()
            texts, self.outbox = self.outbox, []
            self.sent_at = time.monotonic()
            if self.batch and len(texts) > 1:
                await self.send('{"type": "batch", "messages": [' + ", ".join(texts) + "]}")
            else:
                for text in texts:
                    await self.send(text)

    def schedule_summary(self) -> None:
        """At most one summary per SUMMARY_EVERY_S; a burst of finishes ends with one fresh summary
        read after the last of them."""
        self.summary_wanted = time.monotonic()
        if self.summary_task is None or self.summary_task.done():
            self.summary_task = asyncio.ensure_future(self._send_wanted_summaries())

    async def _send_wanted_summaries(self) -> None:
        while self.summary_wanted:
            await asyncio.sleep(max(0.0, self.summary_sent_at + SUMMARY_EVERY_S - time.monotonic()))
            wanted_at, self.summary_wanted = self.summary_wanted, 0.0
            self.summary_sent_at = time.monotonic()
            try:
                text = await run_fanout().summary_text(self.run_id, wanted_at)
            except Exception:  # noqa: BLE001 - the database was busy or away: the summary is still owed
                logger.warning("could not read the summary of run %s; trying again", self.run_id, exc_info=True)
                self.summary_wanted = self.summary_wanted or wanted_at
                continue
            self.push(text)


class GroupFanout:
    """This event loop's channel on the groups of one kind (a run's or a rollout's) its viewers follow.

    One channel per kind: a rollout's events go to its rollout group and its run group, and a channel in
    both would get each event twice with no word of which group it came through."""

    def __init__(self, group_of, key: str):
        self.group_of, self.key = group_of, key  # group name of an id; the event field that holds the id
        self.viewers: dict[int, set] = {}
        self.channel: str | None = None
        self.reader: asyncio.Task | None = None
        self.lock = asyncio.Lock()

    async def join(self, key: int, viewer) -> None:
        """Follow the group of `key` for the viewer (raises when the channel layer cannot be reached)."""
        async with self.lock:
            layer = get_channel_layer()
            if self.channel is None:
                self.channel = await layer.new_channel("fanout.")
                self.reader = asyncio.ensure_future(self._read(layer, self.channel))
            if key not in self.viewers:
                await layer.group_add(self.group_of(key), self.channel)
                self.viewers[key] = set()
            self.viewers[key].add(viewer)

    async def leave(self, key: int, viewer) -> bool:
        """Stop following for the viewer; True when it was the last one of its group here."""
        async with self.lock:
            viewers = self.viewers.get(key)
            if viewers is None or viewer not in viewers:
                return False
            viewers.discard(viewer)
            if viewers:
                return False
            del self.viewers[key]
            try:
                await get_channel_layer().group_discard(self.group_of(key), self.channel)
            except Exception:  # noqa: BLE001 - Redis down: its subscriptions went with it
                logger.warning("could not leave %s", self.group_of(key), exc_info=True)
            return True

    async def _read(self, layer, channel: str) -> None:
        while True:
            event = await layer.receive(channel)
            viewers = self.viewers.get(event.get(self.key))
            if not viewers:
                continue
            try:
                self.deliver(event, viewers)
            except Exception:  # noqa: BLE001 - one bad event must not stop every viewer's stream
                logger.exception("could not deliver %s", event.get("type"))

    def deliver(self, event: dict, viewers: set) -> None:
        for viewer in list(viewers):
            viewer.deliver(event)


class RunFanout(GroupFanout):
    """Run viewers: each event encoded once, into every viewer's outbox, and summaries read once."""

    def __init__(self):
        super().__init__(events.run_group, "run_id")
        self.summaries: dict[int, tuple[float, str]] = {}
        self.summary_locks: dict[int, asyncio.Lock] = {}

    async def leave(self, key: int, viewer) -> bool:
        viewer.stop()
        last = await super().leave(key, viewer)
        if last:
            self.summaries.pop(key, None)
            self.summary_locks.pop(key, None)
        return last

    def deliver(self, event: dict, viewers: set) -> None:
        kind = event["type"]
        text = event_text(event) if kind in ("rollout.steps", "rollout.status") else None
        # The run finished or was cancelled, or a rollout finished: the figures change with it.
        summary = kind == "run.status" or (kind == "rollout.status" and event["status"] in FINISHED_ROLLOUT_STATUSES)
        spacing = BATCH_EVERY_S * min(1.0, len(viewers) / BATCH_FULL_AT)
        for viewer in list(viewers):
            viewer.spacing = spacing
            if text is not None:
                viewer.push(text)
            if summary:
                viewer.schedule_summary()

    async def summary_text(self, run_id: int, wanted_at: float) -> str:
        """The run's summary, read after `wanted_at` (a status change) once for all its viewers."""
        lock = self.summary_locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            cached = self.summaries.get(run_id)
            if cached is not None and cached[0] >= wanted_at:
                return cached[1]
            read_at = time.monotonic()
            text = json.dumps(await read_async(run_summary_message, run_id))
            self.summaries[run_id] = (read_at, text)
            return text


_fanouts: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, GroupFanout]]" = weakref.WeakKeyDictionary()


def _fanout(kind: str, make) -> GroupFanout:
    loop = asyncio.get_running_loop()
    mine = _fanouts.get(loop)
    if mine is None:
        mine = _fanouts[loop] = {}
    if kind not in mine:
        mine[kind] = make()
    return mine[kind]


def run_fanout() -> RunFanout:
    """This event loop's fan-out of run events (one per web process; tests run several loops)."""
    return _fanout("run", RunFanout)


def rollout_fanout() -> GroupFanout:
    """This event loop's fan-out of rollout events: each viewer's `deliver(event)` is called in turn."""
    return _fanout("rollout", lambda: GroupFanout(events.rollout_group, "rollout_id"))
