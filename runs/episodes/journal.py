"""A host's steps in Redis until they are in PostgreSQL, so a host killed between a step's reply and
the next batched write loses nothing: whoever ends the orphaned rollout writes them first.

Steps are appended in order under the episode's lock (the same order as the writer's buffer), and
trimmed from the head by the number of steps each write stored. Replaying a step that was already
stored is harmless: step rows are unique per (rollout, index) and inserts skip existing ones.
"""
import json
import logging
import threading

import redis

from ..artifacts import array_json_default
from . import routing

logger = logging.getLogger(__name__)


def journal_key(rollout_id: int) -> str:
    return f"{routing.prefix()}:journal:{rollout_id}"


def journal_append(r, *, rollout_id: int, step: dict) -> None:
    """Append a step (`r`: a client, or a pipeline whose reply must follow it)."""
    r.rpush(journal_key(rollout_id), json.dumps(step, separators=(",", ":"), ensure_ascii=False, default=array_json_default))


def journal_trim(r: redis.Redis, trims: list[tuple[int, int]]) -> None:
    """Drop the first `count` steps of each (rollout id, count): they are stored."""
    trims = [(rollout_id, count) for rollout_id, count in trims if count]
    if not trims:
        return
    pipe = r.pipeline(transaction=False)
    for rollout_id, count in trims:
        pipe.ltrim(journal_key(rollout_id), count, -1)
    try:
        pipe.execute()
    except redis.RedisError:
        logger.warning("could not trim the step journal of %s rollouts", len(trims), exc_info=True)


def journal_drop(r: redis.Redis, rollout_id: int) -> None:
    try:
        r.delete(journal_key(rollout_id))
    except redis.RedisError:
        logger.warning("could not drop the step journal of rollout %s", rollout_id, exc_info=True)


def journal_steps(r: redis.Redis, rollout_id: int) -> list[dict]:
    """The steps still in the journal, oldest first."""
    return [json.loads(raw) for raw in r.lrange(journal_key(rollout_id), 0, -1)]


_local = threading.local()


class JournalBatch:
    """The journal entries of one direct request (a pipeline's `rpush` and `execute`), sent on this
    thread's own Redis connection: no pool, no pipeline machinery, one short round trip a step."""

    def __init__(self, r: redis.Redis):
        self.r = r
        self.commands: list[tuple] = []

    def rpush(self, key: str, value: str) -> None:
        self.commands.append(("RPUSH", key, value))

    def __len__(self) -> int:
        return len(self.commands)

    def execute(self) -> None:
        if not self.commands:
            return
        pool = self.r.connection_pool
        conn = getattr(_local, "conn", None)
        if conn is None or getattr(_local, "pool", None) is not pool:
            conn = _local.conn = pool.connection_class(**pool.connection_kwargs)
            _local.pool = pool
        try:
            conn.send_packed_command(conn.pack_commands(self.commands))
            for _ in self.commands:
                conn.read_response()
        except BaseException:
            conn.disconnect()
            _local.conn = None
            raise
