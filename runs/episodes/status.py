"""A rollout's status as its run and team see it: sending rollouts to the workers, a run that starts
or ends with its rollouts, the team cap that parks rollouts and frees them again.

Every state change here is a named call (publish, mark started, finish, tell the audit), never a
signal; the worker (worker.py), the episode service and run_cancel (runs/services.py) call them.
"""
import logging
import os

from django.conf import settings
from django.db import connection, transaction
from kombu.exceptions import OperationalError as BrokerUnreachable

from studio.celery import task_send, worker_slots

from .. import events
from ..models import Rollout, RolloutStatus, Run, RunPurpose, RunStatus, RunTally
from ..quality.hooks import audit_run_ended, run_transcripts_due

logger = logging.getLogger(__name__)

EXECUTE_ROLLOUT = "runs.tasks.execute_rollout"
TEAM_CAP_LOCK = 0x7EA1  # pg_advisory_xact_lock(class, team id): claims of one team count one at a time


def stale_after_s() -> float:
    """How long a running rollout may go without a heartbeat before its worker is presumed dead."""
    value = getattr(settings, "ROLLOUT_STALE_AFTER_S", None) or os.environ.get("ROLLOUT_STALE_AFTER_S") or 30
    return float(value)


def team_running_cap() -> int:
    """settings.TEAM_MAX_RUNNING_ROLLOUTS: how many worker rollouts one team may run at once (0: no cap;
    "auto": this worker's concurrency minus one, at least 1, so another team always finds a slot)."""
    value = settings.TEAM_MAX_RUNNING_ROLLOUTS
    if value == "auto":
        return max(1, worker_slots() - 1)
    return int(value or 0)


def rollout_send(rollout_id: int, *, countdown: float | None = None) -> None:
    """Send the rollout's execute_rollout message now (raises when the broker is unreachable)."""
    task_send(EXECUTE_ROLLOUT, rollout_id, countdown=countdown)


def rollouts_send_on_commit(rollout_ids: list[int]) -> None:
    """Once the transaction commits, send each rollout to the workers."""
    if not rollout_ids:
        return

    def send():
        try:
            for rollout_id in rollout_ids:
                rollout_send(rollout_id)
        except BrokerUnreachable:
            # The broker is down (Redis restarting): the rollouts stay queued, and the workers'
            # recovery sends them once it is back (requeue_lost_rollouts), so the caller goes on.
            logger.warning("could not enqueue rollouts %s: the broker is unreachable", rollout_ids, exc_info=True)

    transaction.on_commit(send)


_RUN_STARTED_SQL = f"""
    UPDATE {Run._meta.db_table} SET status = %s WHERE id = %s AND status = %s RETURNING id
"""
# A run ends when its tally (kept by a trigger as rollouts change, runs/sql/run_tally.sql) counts nothing
# queued or running. This runs after the rollout's own write committed, so of two rollouts ending together
# the later check sees both ended. A session run also gains episodes while it runs: one joins under the
# run's row lock (runs.episodes.interactive.session_run_for), so the check first takes that lock
# (_SESSION_RUN_LOCK_SQL) and then reads the tally in a statement of its own, whose snapshot includes an
# episode that joined meanwhile. (One statement could not: an UPDATE that waited for the joiner's row
# re-checks that row alone, and would still count the tally as it was before the joiner committed.)
_RUN_FINISHED_SQL = f"""
    UPDATE {Run._meta.db_table} SET status = %s, finished_at = now()
    WHERE id = %s AND status IN (%s, %s)
        AND NOT EXISTS (SELECT 1 FROM {RunTally._meta.db_table} WHERE run_id = %s AND (n_queued > 0 OR n_running > 0))
    RETURNING id
"""
_SESSION_RUN_LOCK_SQL = f"SELECT id FROM {Run._meta.db_table} WHERE id = %s AND purpose = %s FOR UPDATE"
_TEAM_UNPARK_SQL = "SELECT runs_team_unpark(%s, %s, %s)"
_ROLLOUT_ENDED_SQL = f"""
    WITH finished AS ({_RUN_FINISHED_SQL})
    SELECT (SELECT count(*) FROM finished), ARRAY({_TEAM_UNPARK_SQL})
"""


def run_mark_started(*, run_id: int) -> None:
    """A rollout of a queued run started: the run is running (one statement; no lock once it is)."""
    with connection.cursor() as cursor:
        cursor.execute(_RUN_STARTED_SQL, [RunStatus.RUNNING, run_id, RunStatus.QUEUED])
        started = cursor.fetchone() is not None
    if started:
        events.publish_run(Run(pk=run_id, status=RunStatus.RUNNING))


def run_ended(*, run: Run) -> None:
    """The run finished or was cancelled: its viewers hear it, an audit it belongs to is told, and its
    transcripts are scanned."""
    audit_run_ended(run_id=run.pk)
    run_transcripts_due(run_id=run.pk)
    events.publish_run(run)


def team_slots_freed(*, team_id: int) -> list[int]:
    """The team may run more rollouts now: its parked ones that fit under its cap are enqueued again."""
    with connection.cursor() as cursor:
        cursor.execute(_TEAM_UNPARK_SQL, [team_id, team_running_cap(), TEAM_CAP_LOCK])
        unparked = [row[0] for row in cursor.fetchall()]
    rollouts_send_on_commit(unparked)
    return unparked


def teams_unpark_all() -> list[int]:
    """Every team's parked rollouts that fit under its cap, enqueued (recovery's safety net: a cap
    raised or turned off, or a worker that died between unparking and enqueueing)."""
    teams = set(Rollout.objects.filter(parked=True, status=RolloutStatus.QUEUED).values_list("team_id", flat=True))
    return [rollout_id for team_id in sorted(teams) for rollout_id in team_slots_freed(team_id=team_id)]


def run_finish_if_done(*, run_id: int, team_id: int, session: bool = True) -> None:
    """A rollout of the run ended: the run is finished once none is queued or running, and the team's
    parked rollouts that now fit under its cap are enqueued (one statement for both, after a session
    run's row lock: see _RUN_FINISHED_SQL)."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Locks only a session run's row (no other run gains rollouts while it runs): a joining episode's
        # transaction is waited for, and one that comes later waits for this one and reopens the run.
        # `session=False`: the caller knows the run is no session run, and no statement is spent on it.
        if session:
            cursor.execute(_SESSION_RUN_LOCK_SQL, [run_id, RunPurpose.SESSION])
        cursor.execute(_ROLLOUT_ENDED_SQL, [RunStatus.FINISHED, run_id, RunStatus.QUEUED, RunStatus.RUNNING, run_id,
                                            team_id, team_running_cap(), TEAM_CAP_LOCK])
        finished, unparked = cursor.fetchone()
        rollouts_send_on_commit(unparked)
    if finished:
        run_ended(run=Run.objects.get(pk=run_id))


def rollout_status_changed(rollout: Rollout) -> None:
    """After the transaction commits: publish the rollout's new status and update its run's."""
    def after():
        events.publish_rollout(rollout)
        if rollout.status == RolloutStatus.RUNNING:
            run_mark_started(run_id=rollout.run_id)
        elif rollout.is_finished:
            # A run the rollout was loaded with says its purpose; otherwise the lock is taken to be safe.
            known = Rollout.run.is_cached(rollout)
            session = not known or rollout.run.purpose == RunPurpose.SESSION
            run_finish_if_done(run_id=rollout.run_id, team_id=rollout.team_id, session=session)

    transaction.on_commit(after)
