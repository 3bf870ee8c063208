"""A rollout's stored steps as the `steps` frames its viewers get, read and encoded once per web process.

Viewers who join a rollout ask for the same chunks (after -1, after 499, ...): the first one to ask
reads and encodes a chunk, the others wait for it and send the same text (200 viewers opening one
10,000-step rollout read it once instead of 200 times; bench/bench_viewers.py). Kept while a viewer of
the rollout is connected to this process, let go when the last one leaves.

Stored steps do not change, with one exception: a redelivered task deletes its partial steps and
starts again from 0, and the consumer then calls `forget`. A chunk shorter than CHUNK of a rollout
that still runs grows, so it is shared only while it is being read; a finished rollout's chunks are
kept whole.
"""
import asyncio
import json

from channels.db import database_sync_to_async

from . import events
from .models import Step

CHUNK = 500


def steps_after(rollout_id: int, after: int, limit: int = CHUNK) -> list[dict]:
    """Stored steps with index > `after`, in order, at most `limit`, as rows for `events.step_json`."""
    rows = Step.objects.filter(rollout_id=rollout_id, index__gt=after).order_by("index").values(*events.STEP_FIELDS, "artifact")[:limit]
    return list(rows)


def steps_text(rollout_id: int, steps: list[dict]) -> str:
    """The `steps` message of a batch of stored or published steps, encoded."""
    return json.dumps({"type": "steps", "rollout_id": rollout_id, "steps": [events.step_json(s, rollout_id=rollout_id) for s in steps]})


class Frame:
    """One encoded chunk: its text, the last index it holds and how many steps."""

    __slots__ = ("text", "last_index", "count")

    def __init__(self, text: str, last_index: int, count: int):
        self.text, self.last_index, self.count = text, last_index, count


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
            rows = await database_sync_to_async(steps_after)(self.rollout_id, after)
        except BaseException:
            self.frames.pop(after, None)
            raise
        frame = Frame(steps_text(self.rollout_id, rows), rows[-1]["index"], len(rows)) if rows else None
        if frame is None or (frame.count < CHUNK and not finished):
            self.frames.pop(after, None)
        return frame

    def forget(self) -> None:
        """The rollout restarted from step 0 (a redelivered task): its stored steps are new."""
        self.frames.clear()


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


def open_backlogs() -> int:
    """How many rollouts' backlogs this process holds (0 once every viewer has left)."""
    return len(_backlogs)
