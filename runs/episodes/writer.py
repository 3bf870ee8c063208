"""Writing an episode's steps: a batching StepWriter fenced by the rollout's attempt, and a heartbeat.

A flush stores screenshots in artifact storage, inserts the batch in one statement, bumps the
rollout's counters and publishes the steps live; a writer whose rollout was taken over stops.
"""
import json
import logging
import threading
import time

from django.db import close_old_connections, connection
from django.utils import timezone

from .. import events
from ..artifacts import artifacts_store_for_steps
from ..models import Rollout, RolloutStatus, Step

logger = logging.getLogger(__name__)

FLUSH_EVERY_S = 0.2
FLUSH_EVERY_STEPS = 1000
HEARTBEAT_EVERY_S = 1.0


class LostOwnership(Exception):
    """Another worker took this rollout over (ours was presumed dead); stop without writing more."""


class StepWriter:
    """Buffers steps; a flush writes them in one INSERT, bumps the rollout's counters and publishes them.

    Every write is fenced by the attempt number: a worker that was presumed dead and replaced stops
    at its next flush instead of writing over the new attempt.
    """

    def __init__(self, rollout: Rollout):
        self.rollout = rollout
        self.attempt = rollout.attempts
        self.pending: list[dict] = []
        self.step_count = 0
        self.total_reward = 0.0
        self.last_flush = time.monotonic()

    def add(self, step: dict) -> None:
        self.pending.append(step)
        self.step_count += 1
        self.total_reward += step["reward"] or 0.0

    def take(self) -> tuple[list[dict], int, float]:
        """Take the buffered steps out (with the counters as of them) for `flush_together`."""
        steps, self.pending = self.pending, []
        self.last_flush = time.monotonic()
        return steps, self.step_count, self.total_reward

    def give_back(self, steps: list[dict]) -> None:
        """Steps taken for a write that failed go back ahead of any added since (written next time)."""
        self.pending[:0] = steps

    def due(self) -> bool:
        return len(self.pending) >= FLUSH_EVERY_STEPS or time.monotonic() - self.last_flush >= FLUSH_EVERY_S

    def flush(self) -> None:
        self.last_flush = time.monotonic()
        if not self.pending:
            return
        steps, self.pending = self.pending, []
        try:
            artifacts_store_for_steps(self.rollout.pk, steps)  # screenshots go to media storage, not the row
            _insert_steps(self.rollout.pk, steps)
            updated = Rollout.objects.filter(pk=self.rollout.pk, attempts=self.attempt, status=RolloutStatus.RUNNING).update(
                step_count=self.step_count, total_reward=self.total_reward, heartbeat_at=timezone.now()
            )
        except Exception:
            self.give_back(steps)  # not written (or not counted): the next flush writes them again, once
            raise
        if not updated:
            raise LostOwnership(f"rollout {self.rollout.pk} is no longer ours (attempt {self.attempt})")
        events.publish_steps(self.rollout, steps)


_STEP_TABLE = Step._meta.db_table
_INSERT_STEPS_SQL = f"""
    INSERT INTO {_STEP_TABLE} (rollout_id, "index", action, observation, reward, terminated, truncated, info, elapsed_ms, artifact, created_at)
    SELECT %s, s."index", s.action, s.observation, s.reward, s.terminated, s.truncated, COALESCE(s.info, '{{}}'::json), s.elapsed_ms, s.artifact, now()
    FROM json_to_recordset(%s::json) AS s(
        "index" integer, action jsonb, observation json, reward double precision,
        terminated boolean, truncated boolean, info json, elapsed_ms double precision, artifact varchar)
    ON CONFLICT (rollout_id, "index") DO NOTHING
"""


def _insert_steps(rollout_id: int, steps: list[dict]) -> None:
    """One statement per batch: the batch travels as one JSON document (Django's bulk_create spends
    ~4x longer building model instances and per-value parameters). ON CONFLICT keeps a redelivered
    or racing attempt from ever duplicating a step index."""
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_STEPS_SQL, [rollout_id, _steps_document(steps)])


def _steps_document(rows: list[dict]) -> str:
    """Step rows as one JSON document for json_to_recordset (`json`, not `jsonb`: an observation
    keeps its key order and its -0.0)."""
    document = json.dumps(rows, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if "\\u0000" in document:
        document = document.replace("\\u0000", "\\ufffd")  # PostgreSQL jsonb cannot store NUL characters
    return document


_INSERT_MANY_SQL = f"""
    INSERT INTO {_STEP_TABLE} (rollout_id, "index", action, observation, reward, terminated, truncated, info, elapsed_ms, artifact, created_at)
    SELECT s.rollout_id, s."index", s.action, s.observation, s.reward, s.terminated, s.truncated, COALESCE(s.info, '{{}}'::json), s.elapsed_ms, s.artifact, now()
    FROM json_to_recordset(%s::json) AS s(
        rollout_id bigint, "index" integer, action jsonb, observation json, reward double precision,
        terminated boolean, truncated boolean, info json, elapsed_ms double precision, artifact varchar)
    JOIN jsonb_to_recordset(%s::jsonb) AS o(id bigint, attempts integer) ON o.id = s.rollout_id
    WHERE EXISTS (SELECT 1 FROM {Rollout._meta.db_table} AS r
                  WHERE r.id = o.id AND r.attempts = o.attempts AND r.status = %s)
    ON CONFLICT (rollout_id, "index") DO NOTHING
"""
_COUNT_MANY_SQL = f"""
    UPDATE {Rollout._meta.db_table} AS r
    SET step_count = GREATEST(r.step_count, v.step_count), total_reward = v.total_reward, heartbeat_at = now()
    FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, attempts integer, step_count integer, total_reward double precision)
    WHERE r.id = v.id AND r.attempts = v.attempts AND r.status = %s
    RETURNING r.id
"""


def flush_together(taken: list[tuple["StepWriter", list[dict], int, float]]) -> list["StepWriter"]:
    """Write many writers' steps in one INSERT and one counter UPDATE (an episode host holds thousands
    of episodes: a statement each would be thousands a second), then publish each batch. `taken` holds
    (writer, *writer.take()), taken while the caller held each episode's lock. Returns the writers
    whose rollout is no longer theirs (ended elsewhere)."""
    taken = [item for item in taken if item[1]]
    if not taken:
        return []
    rows, counters = [], []
    for writer, steps, step_count, total_reward in taken:
        artifacts_store_for_steps(writer.rollout.pk, steps)
        rows.extend({**step, "rollout_id": writer.rollout.pk} for step in steps)
        counters.append({"id": writer.rollout.pk, "attempts": writer.attempt, "step_count": step_count,
                         "total_reward": total_reward})
    owners = json.dumps([{"id": item["id"], "attempts": item["attempts"]} for item in counters])
    with connection.cursor() as cursor:
        # A rollout ended elsewhere (its host presumed dead) gets no more rows: they would lie past its end.
        cursor.execute(_INSERT_MANY_SQL, [_steps_document(rows), owners, RolloutStatus.RUNNING])
        cursor.execute(_COUNT_MANY_SQL, [json.dumps(counters), RolloutStatus.RUNNING])
        ours = {row[0] for row in cursor.fetchall()}
    events.publish_steps_many([(writer.rollout, steps) for writer, steps, _, _ in taken if writer.rollout.pk in ours])
    return [writer for writer, *_ in taken if writer.rollout.pk not in ours]


def steps_recover(*, rollout: Rollout, steps: list[dict]) -> None:
    """Store steps a dead host had answered but not written (from its journal), then set the
    rollout's counters from what is stored. Steps already stored are skipped."""
    if not steps:
        return
    artifacts_store_for_steps(rollout.pk, steps)
    _insert_steps(rollout.pk, steps)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {Rollout._meta.db_table} SET
                    step_count = (SELECT count(*) FROM {_STEP_TABLE} WHERE rollout_id = %s),
                    total_reward = (SELECT coalesce(sum(reward), 0) FROM {_STEP_TABLE} WHERE rollout_id = %s)
                WHERE id = %s AND status = %s""",
            [rollout.pk, rollout.pk, rollout.pk, RolloutStatus.RUNNING],
        )


class Heartbeat:
    """A thread that keeps `heartbeat_at` fresh while the main thread waits on long sandbox calls.

    It uses its own database connection (Django's are per thread) and closes it when it stops.
    """

    def __init__(self, rollout: Rollout, every_s: float = HEARTBEAT_EVERY_S):
        self.rollout_id = rollout.pk
        self.attempt = rollout.attempts
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{rollout.pk}", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self):
        try:
            while not self._stop.wait(self.every_s):
                try:
                    Rollout.objects.filter(
                        pk=self.rollout_id, attempts=self.attempt, status=RolloutStatus.RUNNING
                    ).update(heartbeat_at=timezone.now())
                except Exception:  # noqa: BLE001 - a missed beat is retried; it must not kill the thread
                    logger.warning("heartbeat of rollout %s failed", self.rollout_id, exc_info=True)
                    close_old_connections()
        finally:
            connection.close()
