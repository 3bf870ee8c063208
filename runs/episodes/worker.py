"""The rollout lifecycle in a worker: claim a rollout, play its episode, recover rollouts whose worker
died, requeue those the broker lost. Status changes that follow (run started or ended, team slots
freed) are status.py's; the episode itself is engine.py's and the episode service's.
"""
import logging
import os
import socket
import threading
from datetime import timedelta

from django.conf import settings
from django.db import connection, reset_queries, transaction
from django.utils import timezone

from .. import events
from ..models import INFRA_ERROR, AgentKind, Rollout, RolloutStatus, RunStatus, Step
from ..curriculum.services import task_pick
from .engine import run_episode
from .service import rollout_end
from .status import (
    TEAM_CAP_LOCK,
    rollout_send,
    rollout_status_changed,
    rollouts_send_on_commit,
    run_mark_started,
    stale_after_s,
    team_running_cap,
    team_slots_freed,
)
from .writer import LostOwnership

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3


def worker_identity() -> str:
    """host:pid:thread of this execution, so a redelivery can tell a dead owner from a live one."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _owner_is_dead(rollout: Rollout, *, now=None, stale_s: float | None = None) -> bool:
    now = now or timezone.now()
    stale_s = stale_after_s() if stale_s is None else stale_s
    if rollout.heartbeat_at is None or now - rollout.heartbeat_at > timedelta(seconds=stale_s):
        return True
    host, _, rest = rollout.worker.partition(":")
    pid_text, _, thread_text = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False  # another machine: only its heartbeat can tell
    pid = int(pid_text)
    if pid == os.getpid():
        # This very process: alive only if another thread of it is running the rollout now.
        return thread_text == str(threading.get_ident())
    return not _pid_alive(pid)


def _pid_alive(pid: int) -> bool:
    """A killed worker stays a zombie until init reaps it (seconds here): count that as dead."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _team_at_cap(team_id: int) -> bool:
    cap = team_running_cap()
    if not cap:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [TEAM_CAP_LOCK, team_id])
    running = Rollout.objects.filter(team_id=team_id, status=RolloutStatus.RUNNING).exclude(
        run__agent__kind__in=[AgentKind.REMOTE, AgentKind.HUMAN]
    ).count()
    return running >= cap


class Claim:
    def __init__(self, rollout=None, *, skip: str = "", later_s: float = 0.0, parked_team: int | None = None):
        self.rollout, self.skip, self.later_s, self.parked_team = rollout, skip, later_s, parked_team


def rollout_claim(rollout_id: int) -> Claim:
    """Claim the rollout for this worker whatever its state: take over one whose worker died, end one
    that was cancelled or failed too often, park one whose team is at its cap; say why when skipped."""
    with transaction.atomic():
        # Lock the rollout row only (`of=self`): locking the joined run row too made a claim and a
        # cancel (run first, then its rollouts) wait on each other, a deadlock PostgreSQL broke by
        # killing one. A cancel committed after this read is seen at the episode's cancel checks.
        rollout = Rollout.objects.select_for_update(of=("self",)).select_related("run").filter(pk=rollout_id).first()
        if rollout is None:
            return Claim(skip="no such rollout")
        if rollout.is_finished:
            return Claim(skip=f"already {rollout.status}")
        now = timezone.now()
        if rollout.status == RolloutStatus.RUNNING:
            if not _owner_is_dead(rollout, now=now):
                return Claim(skip=f"running on {rollout.worker}", later_s=stale_after_s())
            logger.warning("rollout %s: worker %s is gone (attempt %s); taking over", rollout.pk, rollout.worker, rollout.attempts)
        if rollout.run.status == RunStatus.CANCELLED:
            _finish_unstarted(rollout, RolloutStatus.CANCELLED, "cancelled before it started", "cancelled")
            return Claim(skip="cancelled")
        if rollout.attempts >= MAX_ATTEMPTS:
            _finish_unstarted(
                rollout, RolloutStatus.ERRORED,
                f"the worker running this rollout died {rollout.attempts} times (last: {rollout.worker}); giving up",
                INFRA_ERROR,
            )
            return Claim(skip="too many attempts")
        if rollout.status == RolloutStatus.QUEUED and _team_at_cap(rollout.team_id):
            # The worker slot goes to the next message (another team's, perhaps); this one is parked
            # until a rollout of its team ends (no message circles through the broker meanwhile).
            Rollout.objects.filter(pk=rollout.pk).update(parked=True)
            return Claim(skip="its team is at its cap of running rollouts", parked_team=rollout.team_id)
        # Episodes are deterministic by seed: a restarted attempt replays from step 0.
        Step.objects.filter(rollout=rollout).delete()
        rollout.status, rollout.parked = RolloutStatus.RUNNING, False
        rollout.attempts += 1
        rollout.worker = worker_identity()
        rollout.heartbeat_at = rollout.started_at = now
        rollout.finished_at = None
        rollout.step_count, rollout.total_reward = 0, 0.0
        rollout.error = rollout.verifier_error = rollout.verifier_reason = rollout.end_reason = ""
        rollout.verifier_reward = None
        rollout.save()
    rollout_status_changed(rollout)
    return Claim(rollout)


def _finish_unstarted(rollout: Rollout, status: str, error: str, end_reason: str) -> None:
    rollout.status, rollout.error, rollout.end_reason, rollout.finished_at = status, error, end_reason, timezone.now()
    rollout.save(update_fields=["status", "error", "end_reason", "finished_at"])
    rollout_status_changed(rollout)


def rollout_claim_queued(*, rollout_id: int) -> Rollout | None:
    """The common claim in one statement: a rollout still queued for its first attempt, of a run not
    cancelled, whose team is under its cap, becomes running (no row but the rollout's is locked).
    Returns it loaded for its episode, or None when anything else holds (`rollout_claim` decides)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT rollout_id, run_status FROM runs_rollout_claim(%s, %s, %s, %s)",
                       [rollout_id, worker_identity(), team_running_cap(), TEAM_CAP_LOCK])
        row = cursor.fetchone()
    if row is None:
        return None
    rollout = _rollout_for_episode(rollout_id)

    def after():
        events.publish_rollout(rollout)
        if row[1] == RunStatus.QUEUED:
            run_mark_started(run_id=rollout.run_id)

    transaction.on_commit(after)  # at once, unless a caller's transaction holds the claim
    return rollout


def _rollout_for_episode(rollout_id: int) -> Rollout:
    return Rollout.objects.select_related("team", "run__environment_version__environment", "run__agent").get(pk=rollout_id)


def rollout_execute(*, rollout_id: int) -> str:
    """Claim the rollout, play its episode, store the outcome. Idempotent: a finished rollout, or one
    a live worker is running, is left alone; one whose worker died is restarted (at most MAX_ATTEMPTS)."""
    # With DEBUG on, Django keeps every query (a step batch is a large one) until a request starts;
    # a worker has no requests, so drop them per rollout to keep its memory flat.
    reset_queries()
    rollout = rollout_claim_queued(rollout_id=rollout_id)
    if rollout is None:
        claim = rollout_claim(rollout_id)
        if claim.parked_team is not None:
            # A rollout of the team may have ended between the count and the park: look again.
            team_slots_freed(team_id=claim.parked_team)
        if claim.rollout is None:
            if claim.later_s:
                # Look again once the owner would have gone stale: never leave it running forever.
                rollout_send(rollout_id, countdown=claim.later_s)
            return claim.skip
        rollout = _rollout_for_episode(claim.rollout.pk)
    try:
        if not rollout.task_id and rollout.run.curriculum:
            task_pick(rollout)
        return run_episode(rollout)
    except LostOwnership as exc:
        logger.warning("%s", exc)
        return "lost ownership"
    except Exception as exc:  # noqa: BLE001 - a bug of ours must not leave the rollout running
        logger.exception("rollout %s failed in the worker", rollout.pk)
        rollout_end(rollout=rollout, status=RolloutStatus.ERRORED, error=f"internal error in the worker: {exc!r}", end_reason=INFRA_ERROR)
        return RolloutStatus.ERRORED


def recover_stale_rollouts(*, stale_s: float | None = None) -> list[tuple[int, str]]:
    """Running rollouts whose worker is gone go back to the queue (or end errored after MAX_ATTEMPTS).

    Called when a worker starts and safe to call any time; returns [(rollout id, what was done)].
    """
    done = []
    now = timezone.now()
    # Interactive episodes (plays, remote sessions) are held by episode hosts: end_orphaned_episodes ends theirs.
    candidates = Rollout.objects.filter(status=RolloutStatus.RUNNING).exclude(
        run__agent__kind__in=[AgentKind.REMOTE, AgentKind.HUMAN]
    ).values_list("pk", flat=True)
    for rollout_id in candidates:
        with transaction.atomic():
            rollout = Rollout.objects.select_for_update(skip_locked=True).select_related("run").filter(
                pk=rollout_id, status=RolloutStatus.RUNNING
            ).first()
            if rollout is None or not _owner_is_dead(rollout, now=now, stale_s=stale_s):
                continue
            if rollout.run.status == RunStatus.CANCELLED:
                _finish_unstarted(rollout, RolloutStatus.CANCELLED, "cancelled; its worker had died", "cancelled")
                done.append((rollout.pk, "cancelled"))
            elif rollout.attempts >= MAX_ATTEMPTS:
                _finish_unstarted(
                    rollout, RolloutStatus.ERRORED,
                    f"the worker running this rollout died {rollout.attempts} times (last: {rollout.worker}); giving up",
                    INFRA_ERROR,
                )
                done.append((rollout.pk, "errored"))
            else:
                rollout.status, rollout.worker = RolloutStatus.QUEUED, ""
                rollout.save(update_fields=["status", "worker"])
                rollouts_send_on_commit([rollout.pk])
                done.append((rollout.pk, "requeued"))
    return done


def lost_grace_s() -> float:
    """How long a queued rollout's task may take to reach the broker before it counts as lost."""
    value = getattr(settings, "ROLLOUT_LOST_GRACE_S", None) or os.environ.get("ROLLOUT_LOST_GRACE_S") or 30
    return float(value)


def requeue_lost_rollouts(*, in_broker, grace_s: float | None = None) -> list[int]:
    """Queued rollouts whose task the broker no longer holds (Redis lost and restarted empty) are
    enqueued again; those it holds are left alone, so nothing is enqueued twice. `in_broker()` gives
    the rollout ids the broker holds, read after the candidates so a task sent in between is seen.
    Rollouts queued less than `grace_s` ago may still be on their way to the broker and wait."""
    cutoff = timezone.now() - timedelta(seconds=lost_grace_s() if grace_s is None else grace_s)
    candidates = set(
        Rollout.objects.filter(status=RolloutStatus.QUEUED, created_at__lt=cutoff, parked=False)
        .exclude(run__status=RunStatus.CANCELLED)
        .exclude(run__agent__kind__in=[AgentKind.REMOTE, AgentKind.HUMAN])
        .values_list("pk", flat=True)
    )
    if not candidates:
        return []
    lost = sorted(candidates - in_broker())
    for rollout_id in lost:
        rollout_send(rollout_id)
    return lost
