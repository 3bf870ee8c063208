"""Tells this web process's live viewers when the channel layer's Redis is lost.

A Redis that goes down, or restarts (its `run_id` changes), drops every pub/sub subscription and
every event published meanwhile; the viewers would wait for steps and a final status that never
come. While any viewer is connected, one task per event loop asks Redis for its `run_id` every
CHECK_EVERY_S; when the answer fails or changes, every viewer is told (`stream_lost`: a message, then
a close with CLOSE_STREAM_LOST) and reconnects, reading what it missed from the database.
"""
import asyncio
import logging

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0
CLOSE_STREAM_LOST = 4503


def _layer_url() -> str:
    host = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    return host if isinstance(host, str) else host["address"]


class StreamWatch:
    """The viewers of one event loop and the task that watches Redis for them."""

    def __init__(self):
        self.viewers: set = set()
        self.task: asyncio.Task | None = None

    def add(self, viewer) -> None:
        self.viewers.add(viewer)
        if self.task is None:
            self.task = asyncio.ensure_future(self._watch())

    def discard(self, viewer) -> None:
        self.viewers.discard(viewer)

    async def _watch(self) -> None:
        client = aioredis.Redis.from_url(_layer_url(), socket_timeout=CHECK_EVERY_S, socket_connect_timeout=CHECK_EVERY_S)
        known = _UP  # a viewer just subscribed: Redis was up
        try:
            while self.viewers:
                try:
                    run_id = (await client.info("server")).get("run_id")
                except (RedisError, OSError, asyncio.TimeoutError):
                    run_id = None
                down = run_id is None and known is not None
                restarted = run_id is not None and known not in (None, _UP) and run_id != known
                if down or restarted:
                    logger.warning("the channel layer's Redis %s; telling %s viewers to reconnect",
                                   "is down" if down else "restarted", len(self.viewers))
                    for viewer in list(self.viewers):
                        self.viewers.discard(viewer)
                        asyncio.ensure_future(viewer.stream_lost())
                known = run_id
                await asyncio.sleep(CHECK_EVERY_S)
        except Exception:  # noqa: BLE001 - a watch that fails must not take the viewers down; the next viewer starts another
            logger.exception("the channel layer watch failed")
        finally:
            # No await since the loop's last test: a viewer added from now on starts a new task.
            if self.task is asyncio.current_task():
                self.task = None
            await client.aclose()


_UP = "up"
_watches: dict[int, StreamWatch] = {}


def stream_watch() -> StreamWatch:
    """This event loop's watch (one per web process; tests run several loops)."""
    loop_id = id(asyncio.get_running_loop())
    watch = _watches.get(loop_id)
    if watch is None:
        watch = _watches[loop_id] = StreamWatch()
    return watch
