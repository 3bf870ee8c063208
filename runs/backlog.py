"""A rollout's stored steps as the `steps` frames its viewers get, read and encoded once per web process.

Viewers who join a rollout ask for the same chunks (after -1, after 499, ...): the first one to ask
reads and encodes a chunk, the others wait for it and send the same text (200 viewers opening one
10,000-step rollout read it once instead of 200 times; bench/bench_viewers.py). Kept while a viewer of
the rollout is connected to this process, let go when the last one leaves.

Stored steps do not change, with one exception: a redelivered task deletes its partial steps and
starts again from 0, and the consumer then calls `forget`. A chunk that is not full of a rollout
that still runs grows, so it is shared only while it is being read; a finished rollout's chunks are
kept whole.
"""
import asyncio
import json
import time
import weakref

from studio.db_threads import read_async

from . import events
from .models import Step

CHUNK = 500
# The first chunk of a rollout is smaller: a viewer sees the beginning sooner, and so do the others
# joining at the same moment, whose handshakes wait while the server writes the first joiners' chunks.
FIRST_CHUNK = 100


def chunk_after(after: int) -> int:
    """How many steps the chunk after index `after` holds at most."""
    return FIRST_CHUNK if after < 0 else CHUNK


def steps_after(rollout_id: int, after: int, limit: int = CHUNK) -> list[dict]:
    """Stored steps with index > `after`, in order, at most `limit`, as rows for `events.step_json`."""
    rows = Step.objects.filter(rollout_id=rollout_id, index__gt=after).order_by("index").values(*events.STEP_FIELDS, "artifact")[:limit]
    return list(rows)


def steps_text(rollout_id: int, steps: list[dict]) -> str:
    """The `steps` message of a batch of stored or published steps, encoded."""
    return json.dumps({"type": "steps", "rollout_id": rollout_id, "steps": [events.step_json(s, rollout_id=rollout_id) for s in steps]})


class Frame:
    """One encoded chunk: its text, the last index it holds, how many steps, and whether it is full
    (holds as many as a chunk may: more may follow)."""

    __slots__ = ("text", "last_index", "count", "full")

    def __init__(self, text: str, last_index: int, count: int, full: bool):
        self.text, self.last_index, self.count, self.full = text, last_index, count, full


class RolloutBacklog:
    """The encoded chunks of one rollout, shared by this process's viewers of it."""

    def __init__(self, rollout_id: int):
        self.rollout_id = rollout_id
        self.viewers = 0
        self.frames: dict[int, asyncio.Future] = {}

    async def frame_after(self, after: int, *, finished: bool) -> Frame | None:
        """The chunk of stored steps after index `after` (None when there are none), read once for
        every viewer that asks while it is kept. `finished`: the rollout's steps no longer change."""
        read = self.frames.get(after)
        if read is None:
            # A task of its own: a viewer who leaves mid-read does not cancel the others' chunk.
            read = self.frames[after] = asyncio.ensure_future(self._read(after, finished))
        return await asyncio.shield(read)

    async def _read(self, after: int, finished: bool) -> Frame | None:
        try:
            rows = await read_async(steps_after, self.rollout_id, after, chunk_after(after))
        except BaseException:
            self.frames.pop(after, None)
            raise
        full = len(rows) == chunk_after(after)
        frame = Frame(steps_text(self.rollout_id, rows), rows[-1]["index"], len(rows), full) if rows else None
        if frame is None or (not full and not finished):
            self.frames.pop(after, None)
        return frame

    def forget(self) -> None:
        """The rollout restarted from step 0 (a redelivered task): its stored steps are new."""
        self.frames.clear()


class FirstStepsFirst:
    """Viewers of this event loop still joining go before the others' further chunks: 200 viewers
    opening one rollout together each see its beginning sooner when the first joiners do not write
    their whole backlog (and their clients read it) meanwhile. A viewer's further chunk waits while
    any viewer is owed its first chunk, or one began joining less than QUIET_S ago (a burst of joins
    is still arriving), at most MAX_DEFER_S in all, so a stream of new viewers does not hold the others
    up for long."""

    QUIET_S = 0.05
    MAX_DEFER_S = 1.0

    def __init__(self):
        self.owed = 0
        self.began_at = 0.0
        self.none_owed = asyncio.Event()
        self.none_owed.set()

    def begin(self) -> None:
        self.owed += 1
        self.began_at = time.monotonic()
        self.none_owed.clear()

    def done(self) -> None:
        self.owed -= 1
        if self.owed <= 0:
            self.owed = 0
            self.none_owed.set()

    async def wait_turn(self) -> None:
        deadline = time.monotonic() + self.MAX_DEFER_S
        while (now := time.monotonic()) < deadline:
            if self.owed:
                try:
                    await asyncio.wait_for(self.none_owed.wait(), deadline - now)
                except TimeoutError:
                    return
            elif now < self.began_at + self.QUIET_S:
                await asyncio.sleep(min(self.began_at + self.QUIET_S, deadline) - now)
            else:
                break
        await asyncio.sleep(0)  # others' handshakes still get their turn between chunks


_first_steps_first: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FirstStepsFirst]" = weakref.WeakKeyDictionary()


def first_steps_first() -> FirstStepsFirst:
    """This event loop's queue order of first chunks before further ones."""
    loop = asyncio.get_running_loop()
    order = _first_steps_first.get(loop)
    if order is None:
        order = _first_steps_first[loop] = FirstStepsFirst()
    return order


# Per event loop (one per web process; tests run several), by rollout id.
_backlogs: dict[tuple[int, int], RolloutBacklog] = {}


def backlog_join(rollout_id: int) -> RolloutBacklog:
    """The shared backlog of a rollout for one more viewer; `backlog_leave` when it goes."""
    key = (id(asyncio.get_running_loop()), rollout_id)
    backlog = _backlogs.get(key)
    if backlog is None:
        backlog = _backlogs[key] = RolloutBacklog(rollout_id)
    backlog.viewers += 1
    return backlog


def backlog_leave(backlog: RolloutBacklog) -> None:
    backlog.viewers -= 1
    if backlog.viewers <= 0:
        backlog.frames.clear()
        key = (id(asyncio.get_running_loop()), backlog.rollout_id)
        if _backlogs.get(key) is backlog:
            del _backlogs[key]


def open_backlogs(rollout_id: int | None = None) -> int:
    """How many rollouts' backlogs this process holds (0 once every viewer has left); of one rollout if given."""
    return len(_backlogs) if rollout_id is None else sum(1 for _, held in _backlogs if held == rollout_id)
