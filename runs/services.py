"""State changes of agents, runs and rollouts: create, enqueue, claim, finish, cancel, recover, rerun.

Pages, the API, the CLI and the Celery task all call these; permission checks happen at the edge.
"""
import logging
import math
import os
import socket
import threading
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, reset_queries, transaction
from django.db.models.signals import post_save
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from environments.package import LIMIT_MAXIMA, MEMORY_MB_RANGE
from environments.dependencies.services import ensure_version_runnable
from studio.errors import DomainError
from studio.storage_quota import storage_quota_check

from . import events
from .agents import code_hash
from .episodes.setup import RUN_LIMIT_KEYS
from .models import (
    INFRA_ERROR,
    Agent,
    AgentKind,
    Rollout,
    RolloutStatus,
    Run,
    RunStatus,
    RunTally,
    Step,
)

logger = logging.getLogger(__name__)

MAX_ROLLOUTS_PER_RUN = 10_000
MAX_ATTEMPTS = 3
RUNNABLE_AGENT_KINDS = (AgentKind.RANDOM, AgentKind.SCRIPTED, AgentKind.OPENAI)


class InvalidRun(DomainError):
    pass


class InvalidAgent(DomainError):
    pass


def stale_after_s() -> float:
    """How long a running rollout may go without a heartbeat before its worker is presumed dead."""
    value = getattr(settings, "ROLLOUT_STALE_AFTER_S", None) or os.environ.get("ROLLOUT_STALE_AFTER_S") or 30
    return float(value)


# -- agents ---------------------------------------------------------------------------------------


def agent_create(
    *, team, actor, name: str, kind: str, code: str = "", config: dict | None = None, api_key: str = "",
) -> Agent:
    """`api_key` (model agents) is stored apart from the config, as a secret no interface shows again."""
    name = (name or "").strip()
    if not name:
        raise InvalidAgent("An agent needs a name.", field="name")
    if len(name) > 120:
        raise InvalidAgent("Name is longer than 120 characters.", field="name")
    if kind not in AgentKind.values:
        raise InvalidAgent(f"Kind must be one of {', '.join(AgentKind.values)}.", field="kind")
    if kind == AgentKind.SCRIPTED:
        _check_scripted_code(code)
    if kind == AgentKind.OPENAI:
        from .openai_agent import checked_config

        config, api_key = checked_config(config, api_key)
    if Agent.objects.filter(team=team, name=name).exists():
        raise InvalidAgent(f"This team already has an agent named {name!r}.", field="name")
    with transaction.atomic():
        agent = Agent.objects.create(
            team=team, name=name, kind=kind, code=code or "", code_hash=code_hash(code or ""),
            config=config or {}, created_by=actor,
        )
        if api_key:
            from .openai_agent import agent_api_key_set

            agent_api_key_set(agent=agent, api_key=api_key, actor=actor)
    return agent


def _check_scripted_code(code: str) -> None:
    import ast

    if not (code or "").strip():
        raise InvalidAgent("A scripted agent needs code with an act(observation, info) function.", field="code")
    try:
        tree = ast.parse(code, filename="agent.py")
    except SyntaxError as exc:
        raise InvalidAgent(f"agent.py line {exc.lineno}: {exc.msg}", field="code") from None
    names = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    imported = {(a.asname or a.name) for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
    if "act" not in names | assigned | imported:
        raise InvalidAgent("agent.py has no act(observation, info) function.", field="code")


def agent_get_or_create(*, team, actor, name: str, kind: str, code: str = "") -> Agent:
    """The team's agent of that name when it has the same kind and code; a new one otherwise (CLI)."""
    existing = Agent.objects.filter(team=team, name=name).first()
    if existing is None:
        try:
            with transaction.atomic():
                return agent_create(team=team, actor=actor, name=name, kind=kind, code=code)
        except (IntegrityError, InvalidAgent):
            existing = Agent.objects.filter(team=team, name=name).first()  # created at the same moment elsewhere
            if existing is None:
                raise
    if existing.kind == kind and existing.code_hash == code_hash(code or ""):
        return existing
    # Same name, different code: keep both, so old runs still name the code they ran.
    suffix = code_hash(code or "")[:8]
    return agent_get_or_create(team=team, actor=actor, name=f"{name}-{suffix}", kind=kind, code=code)


# -- runs -----------------------------------------------------------------------------------------


def _selected_tasks(version, task_ids, difficulties) -> list[dict]:
    tasks = list(version.tasks)
    if task_ids != "all":
        if isinstance(task_ids, str) or not isinstance(task_ids, (list, tuple)) or not task_ids:
            raise InvalidRun('Tasks must be "all" or a non-empty list of task ids.', field="task_ids")
        wanted = [str(task_id) for task_id in task_ids]
        known = {str(task["id"]) for task in tasks}
        unknown = [task_id for task_id in wanted if task_id not in known]
        if unknown:
            raise InvalidRun(f"Unknown task ids in {version.label}: {', '.join(unknown)}.", field="task_ids")
        order = {task_id: position for position, task_id in enumerate(dict.fromkeys(wanted))}
        tasks = sorted((task for task in tasks if str(task["id"]) in order), key=lambda task: order[str(task["id"])])
    if difficulties:
        allowed = set(difficulties)
        tasks = [task for task in tasks if task.get("difficulty") in allowed]
    if not tasks:
        raise InvalidRun("No task matches this selection.", field="task_ids" if task_ids != "all" else "difficulties")
    return tasks


def _checked_seeds(seeds) -> list[int]:
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise InvalidRun("Give at least one seed.", field="seeds")
    checked = []
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not (0 <= seed < 2**63):
            raise InvalidRun(f"Seeds must be whole numbers from 0 to 2^63-1, not {seed!r}.", field="seeds")
        checked.append(seed)
    return checked


def _checked_limits(limits) -> dict:
    """A run's limits, each a finite number within environments.package.LIMIT_MAXIMA."""
    if not limits:
        return {}
    if not isinstance(limits, dict):
        raise InvalidRun("Limits must be an object.", field="limits")
    checked = {}
    for key, value in limits.items():
        if key not in RUN_LIMIT_KEYS:
            raise InvalidRun(f"Unknown limit {key!r}; limits are {', '.join(RUN_LIMIT_KEYS)}.", field="limits")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InvalidRun(f"Limit {key} must be a positive number, not {value!r}.", field=f"limits.{key}")
        if value > LIMIT_MAXIMA[key]:
            raise InvalidRun(f"Limit {key} must be at most {LIMIT_MAXIMA[key]}, not {value!r}.", field=f"limits.{key}")
        if key in ("max_steps", "memory_mb"):
            if int(value) != value:
                raise InvalidRun(f"Limit {key} must be a whole number.", field=f"limits.{key}")
            value = int(value)
        checked[key] = value
    low, high = MEMORY_MB_RANGE
    if checked.get("memory_mb") is not None and not low <= checked["memory_mb"] <= high:
        raise InvalidRun(f"Limit memory_mb must be from {low} to {high}.", field="limits.memory_mb")
    return checked


def run_create(
    *, team, actor, version, agent, task_ids="all", difficulties=None, seeds=(0,), repeats: int = 1,
    limits: dict | None = None, reviews_required: int = 1, enqueue: bool = True,
) -> Run:
    """One rollout per (task, seed, repeat), each enqueued once the transaction commits
    (`enqueue=False`: the caller executes them itself, as `run_rollouts --inline` does)."""
    if version.environment.team_id != team.pk:
        raise InvalidRun("That environment version belongs to another team.", field="version")
    if agent.team_id != team.pk:
        raise InvalidRun("That agent belongs to another team.", field="agent")
    if agent.kind not in RUNNABLE_AGENT_KINDS:
        raise InvalidRun(f"Agents of kind {agent.kind!r} cannot run rollouts yet.", field="agent")
    storage_quota_check(team_id=team.pk, what="New run")
    ensure_version_runnable(version)  # its dependency environment built and its entrypoint checked
    tasks = _selected_tasks(version, task_ids, difficulties)
    seeds = _checked_seeds(list(seeds) if isinstance(seeds, (list, tuple, range)) else seeds)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InvalidRun("Repeats must be a whole number of at least 1.", field="repeats")
    if isinstance(reviews_required, bool) or not isinstance(reviews_required, int) or not 1 <= reviews_required <= 10:
        raise InvalidRun("Reviews required must be from 1 to 10.", field="reviews_required")
    total = len(tasks) * len(seeds) * repeats
    if total > MAX_ROLLOUTS_PER_RUN:
        raise InvalidRun(
            f"This run would have {total} rollouts ({len(tasks)} tasks x {len(seeds)} seeds x {repeats} repeats);"
            f" the most is {MAX_ROLLOUTS_PER_RUN}.",
            field="seeds",
        )
    limits = _checked_limits(limits)
    with transaction.atomic():
        run = Run.objects.create(
            team=team, environment_version=version, agent=agent, task_ids=[str(task["id"]) for task in tasks],
            seeds=seeds, repeats=repeats, limits=limits, reviews_required=reviews_required, created_by=actor,
        )
        rollouts = Rollout.objects.bulk_create(
            [
                Rollout(team=team, run=run, task_id=str(task["id"]), seed=seed, repeat=repeat)
                for task in tasks
                for seed in seeds
                for repeat in range(repeats)
            ],
            batch_size=2000,
        )
        if enqueue:
            _enqueue_on_commit([rollout.pk for rollout in rollouts])
    return run


def _enqueue_on_commit(rollout_ids: list[int]) -> None:
    if not rollout_ids:
        return
    from .tasks import execute_rollout

    def send():
        try:
            for rollout_id in rollout_ids:
                execute_rollout.delay(rollout_id)
        except BrokerUnreachable:
            # The broker is down (Redis restarting): the rollouts stay queued, and the workers'
            # recovery sends them once it is back (requeue_lost_rollouts), so the caller goes on.
            logger.warning("could not enqueue rollouts %s: the broker is unreachable", rollout_ids, exc_info=True)

    transaction.on_commit(send)


def run_cancel(*, run: Run, actor) -> Run:
    """Queued rollouts become cancelled and never start; running ones stop within ~0.5 s: their worker's
    heartbeat thread sees the cancel and kills the sandboxes, so even a step that hangs ends at once.

    Only rollouts still queued when the update reaches them are cancelled: a worker that claimed one
    a moment before (it holds the rollout's row lock, never the run's) keeps it, and stops it at its
    next cancel check. Lock order is run, then rollouts; a claim takes only its rollout.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status in (RunStatus.FINISHED, RunStatus.CANCELLED):
            return run
        now = timezone.now()
        run.status = RunStatus.CANCELLED
        run.finished_at = now
        run.save(update_fields=["status", "finished_at"])
        # PostgreSQL re-checks status=queued on each row after waiting for its lock, so a row a
        # claim has just made running is left alone.
        Rollout.objects.filter(run=run, status=RolloutStatus.QUEUED).update(
            status=RolloutStatus.CANCELLED, end_reason="cancelled", error="cancelled before it started", finished_at=now
        )

    def announce():
        events.publish_run(run)
        cancelled = Rollout.objects.filter(run=run, status=RolloutStatus.CANCELLED, finished_at=now)
        for rollout in cancelled.iterator():
            events.publish_rollout(rollout)

    transaction.on_commit(announce)
    return run


_RUN_STARTED_SQL = f"""
    UPDATE {Run._meta.db_table} SET status = %s WHERE id = %s AND status = %s RETURNING id
"""
# A run ends when its tally (kept by a trigger as rollouts change, migration 0011) counts nothing queued
# or running. No lock: this runs after the rollout's own write committed, so of two rollouts ending
# together the later check sees both ended.
_RUN_FINISHED_SQL = f"""
    UPDATE {Run._meta.db_table} SET status = %s, finished_at = now()
    WHERE id = %s AND status IN (%s, %s)
        AND NOT EXISTS (SELECT 1 FROM {RunTally._meta.db_table} WHERE run_id = %s AND (n_queued > 0 OR n_running > 0))
    RETURNING id
"""


def run_mark_started(*, run_id: int) -> None:
    """A rollout of a queued run started: the run is running (one statement; no lock once it is)."""
    with connection.cursor() as cursor:
        cursor.execute(_RUN_STARTED_SQL, [RunStatus.RUNNING, run_id, RunStatus.QUEUED])
        started = cursor.fetchone() is not None
    if started:
        events.publish_run(Run(pk=run_id, status=RunStatus.RUNNING))


_TEAM_UNPARK_SQL = "SELECT runs_team_unpark(%s, %s, %s)"
_ROLLOUT_ENDED_SQL = f"""
    WITH finished AS ({_RUN_FINISHED_SQL})
    SELECT (SELECT count(*) FROM finished), ARRAY({_TEAM_UNPARK_SQL})
"""


def team_slots_freed(*, team_id: int) -> list[int]:
    """The team may run more rollouts now: its parked ones that fit under its cap are enqueued again."""
    with connection.cursor() as cursor:
        cursor.execute(_TEAM_UNPARK_SQL, [team_id, team_running_cap(), _TEAM_CAP_LOCK])
        unparked = [row[0] for row in cursor.fetchall()]
    _enqueue_on_commit(unparked)
    return unparked


def teams_unpark_all() -> list[int]:
    """Every team's parked rollouts that fit under its cap, enqueued (recovery's safety net: a cap
    raised or turned off, or a worker that died between unparking and enqueueing)."""
    teams = set(Rollout.objects.filter(parked=True, status=RolloutStatus.QUEUED).values_list("team_id", flat=True))
    return [rollout_id for team_id in sorted(teams) for rollout_id in team_slots_freed(team_id=team_id)]


def run_finish_if_done(*, run_id: int, team_id: int) -> None:
    """A rollout of the run ended: the run is finished once none is queued or running, and the team's
    parked rollouts that now fit under its cap are enqueued (one statement for both)."""
    with connection.cursor() as cursor:
        cursor.execute(_ROLLOUT_ENDED_SQL, [RunStatus.FINISHED, run_id, RunStatus.QUEUED, RunStatus.RUNNING, run_id,
                                            team_id, team_running_cap(), _TEAM_CAP_LOCK])
        finished, unparked = cursor.fetchone()
    _enqueue_on_commit(unparked)
    if finished:
        run = Run.objects.get(pk=run_id)
        # What Run.save() would have told its listeners (the quality app completes an audit's run).
        post_save.send(sender=Run, instance=run, created=False, update_fields=frozenset({"status", "finished_at"}),
                       raw=False, using=connection.alias)
        events.publish_run(run)


# -- executing one rollout ------------------------------------------------------------------------


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


_TEAM_CAP_LOCK = 0x7EA1  # pg_advisory_xact_lock(class, team id): claims of one team count one at a time


def team_running_cap() -> int:
    """settings.TEAM_MAX_RUNNING_ROLLOUTS: how many worker rollouts one team may run at once (0: no cap;
    "auto": this worker's concurrency minus one, at least 1, so another team always finds a slot)."""
    value = settings.TEAM_MAX_RUNNING_ROLLOUTS
    if value == "auto":
        from studio.celery import worker_slots

        return max(1, worker_slots() - 1)
    return int(value or 0)


def _team_at_cap(team_id: int) -> bool:
    cap = team_running_cap()
    if not cap:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_TEAM_CAP_LOCK, team_id])
    running = Rollout.objects.filter(team_id=team_id, status=RolloutStatus.RUNNING).exclude(
        run__agent__kind__in=[AgentKind.REMOTE, AgentKind.HUMAN]
    ).count()
    return running >= cap


class _Claim:
    def __init__(self, rollout=None, *, skip: str = "", later_s: float = 0.0, parked_team: int | None = None):
        self.rollout, self.skip, self.later_s, self.parked_team = rollout, skip, later_s, parked_team


def _rollout_claim(rollout_id: int) -> _Claim:
    with transaction.atomic():
        # Lock the rollout row only (`of=self`): locking the joined run row too made a claim and a
        # cancel (run first, then its rollouts) wait on each other, a deadlock PostgreSQL broke by
        # killing one. A cancel committed after this read is seen at the episode's cancel checks.
        rollout = Rollout.objects.select_for_update(of=("self",)).select_related("run").filter(pk=rollout_id).first()
        if rollout is None:
            return _Claim(skip="no such rollout")
        if rollout.is_finished:
            return _Claim(skip=f"already {rollout.status}")
        now = timezone.now()
        if rollout.status == RolloutStatus.RUNNING:
            if not _owner_is_dead(rollout, now=now):
                return _Claim(skip=f"running on {rollout.worker}", later_s=stale_after_s())
            logger.warning("rollout %s: worker %s is gone (attempt %s); taking over", rollout.pk, rollout.worker, rollout.attempts)
        if rollout.run.status == RunStatus.CANCELLED:
            _finish_unstarted(rollout, RolloutStatus.CANCELLED, "cancelled before it started", "cancelled")
            return _Claim(skip="cancelled")
        if rollout.attempts >= MAX_ATTEMPTS:
            _finish_unstarted(
                rollout, RolloutStatus.ERRORED,
                f"the worker running this rollout died {rollout.attempts} times (last: {rollout.worker}); giving up",
                INFRA_ERROR,
            )
            return _Claim(skip="too many attempts")
        if rollout.status == RolloutStatus.QUEUED and _team_at_cap(rollout.team_id):
            # The worker slot goes to the next message (another team's, perhaps); this one is parked
            # until a rollout of its team ends (no message circles through the broker meanwhile).
            Rollout.objects.filter(pk=rollout.pk).update(parked=True)
            return _Claim(skip="its team is at its cap of running rollouts", parked_team=rollout.team_id)
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
    return _Claim(rollout)


def _finish_unstarted(rollout: Rollout, status: str, error: str, end_reason: str) -> None:
    rollout.status, rollout.error, rollout.end_reason, rollout.finished_at = status, error, end_reason, timezone.now()
    rollout.save(update_fields=["status", "error", "end_reason", "finished_at"])
    rollout_status_changed(rollout)


def rollout_status_changed(rollout: Rollout) -> None:
    """After the transaction commits: publish the rollout's new status and update its run's."""
    def after():
        events.publish_rollout(rollout)
        if rollout.status == RolloutStatus.RUNNING:
            run_mark_started(run_id=rollout.run_id)
        elif rollout.is_finished:
            run_finish_if_done(run_id=rollout.run_id, team_id=rollout.team_id)

    transaction.on_commit(after)


def rollout_claim_queued(*, rollout_id: int) -> Rollout | None:
    """The common claim in one statement: a rollout still queued for its first attempt, of a run not
    cancelled, whose team is under its cap, becomes running (no row but the rollout's is locked).
    Returns it loaded for its episode, or None when anything else holds (`_rollout_claim` decides)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT rollout_id, run_status FROM runs_rollout_claim(%s, %s, %s, %s)",
                       [rollout_id, worker_identity(), team_running_cap(), _TEAM_CAP_LOCK])
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
        claim = _rollout_claim(rollout_id)
        if claim.parked_team is not None:
            # A rollout of the team may have ended between the count and the park: look again.
            team_slots_freed(team_id=claim.parked_team)
        if claim.rollout is None:
            if claim.later_s:
                # Look again once the owner would have gone stale: never leave it running forever.
                from .tasks import execute_rollout

                execute_rollout.apply_async((rollout_id,), countdown=claim.later_s)
            return claim.skip
        rollout = _rollout_for_episode(claim.rollout.pk)
    from .engine import run_episode
    from .episodes import LostOwnership, rollout_end

    try:
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
                _enqueue_on_commit([rollout.pk])
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
    if lost:
        from .tasks import execute_rollout

        for rollout_id in lost:
            execute_rollout.delay(rollout_id)
    return lost


# -- reruns ---------------------------------------------------------------------------------------


def rollout_rerun(*, rollout: Rollout, actor) -> Rollout:
    """The same version, task, seed and agent again, as a one-rollout run linked through `rerun_of`."""
    source_run = rollout.run
    storage_quota_check(team_id=rollout.team_id, what="Rerun")
    with transaction.atomic():
        run = Run.objects.create(
            team_id=rollout.team_id, environment_version_id=source_run.environment_version_id,
            agent_id=source_run.agent_id, task_ids=[rollout.task_id], seeds=[rollout.seed], repeats=1,
            limits=source_run.limits, reviews_required=source_run.reviews_required, created_by=actor,
        )
        rerun = Rollout.objects.create(
            team_id=rollout.team_id, run=run, task_id=rollout.task_id, seed=rollout.seed,
            repeat=rollout.repeat, rerun_of=rollout,
        )
        _enqueue_on_commit([rerun.pk])
    return rerun
