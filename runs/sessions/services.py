"""Open, step and close remote sessions; an idle reaper closes the ones their client forgot.

Sessions live in this process's memory (a sandbox is a child process of it): a registry keyed by
session id, one lock per session so steps of one session never interleave, and a reaper thread that
runs while any session is open. Steps go through the engine's StepWriter, so they are written in
batches and published live exactly as a worker's are.
"""
import dataclasses
import logging
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from studio.errors import DomainError

from .. import services as run_services
from ..engine import DEFAULT_VERIFY_TIMEOUT_S, FLUSH_EVERY_STEPS, EpisodeOutcome, StepWriter, _public_facts, _verify, describe_fault, effective_limits
from ..models import AgentKind, Rollout, RolloutStatus, Run, RunStatus
from ..sandbox import SandboxError, SandboxLimits, SandboxTimeout
from ..sandbox.backends import sandbox_for

logger = logging.getLogger(__name__)

REMOTE_AGENT_NAME = "remote"
HEARTBEAT_EVERY_S = 2.0


def idle_timeout_s() -> float:
    """A session nobody stepped for this long is closed (its rollout ends timed_out)."""
    return float(getattr(settings, "SESSION_IDLE_TIMEOUT_S", None) or os.environ.get("SESSION_IDLE_TIMEOUT_S") or 300)


def max_sessions() -> int:
    return int(getattr(settings, "SESSION_MAX_OPEN", None) or os.environ.get("SESSION_MAX_OPEN") or 512)


class InvalidSession(DomainError):
    pass


class SessionNotFound(DomainError):
    status = 404


class SessionEnded(DomainError):
    """Stepping a session whose episode is over (or that failed): close it, or open a new one."""

    status = 409


class TooManySessions(DomainError):
    status = 503


@dataclasses.dataclass
class Session:
    id: str
    team_id: int
    rollout: Rollout
    sandbox: object
    writer: StepWriter
    limits: dict
    max_steps: int
    verify_timeout_s: float
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    last_beat: float = dataclasses.field(default_factory=time.monotonic)
    done: bool = False
    end_reason: str = ""


_sessions: dict[str, Session] = {}
# Sandboxes die with the thread that forked them (PR_SET_PDEATHSIG), and an ASGI server runs each
# request's sync code on a short-lived thread: so sandboxes of sessions are forked from this one.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-spawn")
_registry_lock = threading.Lock()
_reaper: threading.Thread | None = None


def open_session_count() -> int:
    return len(_sessions)


# -- start ---------------------------------------------------------------------------------------


def session_start(*, team, actor, version, task_id: str, seed: int) -> tuple[Session, dict]:
    """Start a sandbox for (version, task, seed), record a running rollout of the `remote` agent, reset.
    Returns the session and {observation, tools, action_space}."""
    if version.environment.team_id != team.pk:
        raise InvalidSession("That environment version belongs to another team.", field="version")
    task = next((t for t in version.tasks if str(t.get("id")) == str(task_id)), None)
    if task is None:
        raise InvalidSession(f"Task {task_id!r} is not in {version.label}.", field="task_id")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InvalidSession(f"The seed must be a whole number from 0 to 2^63-1, not {seed!r}.", field="seed")
    if len(_sessions) >= max_sessions():
        raise TooManySessions(f"This server holds {max_sessions()} open sessions already; close some first.")
    close_orphaned_sessions()
    limits = effective_limits(version, {})
    agent = run_services.agent_get_or_create(team=team, actor=actor, name=REMOTE_AGENT_NAME, kind=AgentKind.REMOTE)
    session_id = secrets.token_urlsafe(16)
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.create(
            team=team, environment_version=version, agent=agent, task_ids=[str(task["id"])], seeds=[seed],
            limits={}, status=RunStatus.RUNNING, created_by=actor,
        )
        rollout = Rollout.objects.create(
            team=team, run=run, task_id=str(task["id"]), seed=seed, status=RolloutStatus.RUNNING, attempts=1,
            worker=f"{run_services.worker_identity()}:session-{session_id[:8]}", started_at=now, heartbeat_at=now,
        )
        transaction.on_commit(lambda: run_services.events.publish_rollout(rollout))
    sandbox = sandbox_for(settings.SANDBOX_BACKEND)
    manifest = version.manifest
    try:
        _spawner.submit(sandbox.spawn).result()
        sandbox.start(version.files, mode="env", entrypoint=manifest["entrypoint"], limits=SandboxLimits.from_dict(limits))
        observation = sandbox.reset(task, seed)
    except SandboxError as exc:
        sandbox.close()
        reason = describe_fault(sandbox.label, exc)
        _finish(rollout, _failed_outcome(rollout, exc, reason, limits, sandbox))
        raise SessionEnded(f"The environment did not start: {reason}") from None
    Rollout.objects.filter(pk=rollout.pk).update(initial_observation=observation)
    session = Session(
        id=session_id, team_id=team.pk, rollout=rollout, sandbox=sandbox, writer=StepWriter(rollout), limits=limits,
        max_steps=int(limits["max_steps"]),
        verify_timeout_s=float(limits.get("verify_timeout_s") or DEFAULT_VERIFY_TIMEOUT_S),
    )
    with _registry_lock:
        _sessions[session_id] = session
    _ensure_reaper()
    return session, {"observation": observation, "tools": sandbox.tools or [], "action_space": sandbox.action_space}


def session_get(*, team, session_id: str) -> Session:
    session = _sessions.get(session_id)
    if session is None or session.team_id != team.pk:
        raise SessionNotFound("No open session with this id (closed, timed out, or held by another server).")
    return session


# -- step ----------------------------------------------------------------------------------------


def session_step(*, session: Session, action) -> dict:
    """One env step; the step is stored and published like a worker's. Refused once the episode is over."""
    with session.lock:
        if session.sandbox is None:
            raise SessionNotFound("This session is closed.")
        if session.done:
            raise SessionEnded(f"The episode is over ({session.end_reason}); close the session or start a new one.")
        session.last_used = time.monotonic()
        started = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info = session.sandbox.step(action)
        except SandboxError as exc:
            reason = describe_fault(session.sandbox.label, exc)
            _close_locked(session, outcome=_failed_outcome(session.rollout, exc, reason, session.limits, session.sandbox))
            raise SessionEnded(f"The environment failed: {reason}") from None
        writer = session.writer
        index = writer.step_count
        end_reason = "terminated" if terminated else "truncated" if truncated else ""
        if not end_reason and index + 1 >= session.max_steps:
            truncated, end_reason = True, "max_steps"  # the version's max_steps holds for remote sessions too
        step = {
            "index": index, "action": action, "observation": observation,
            "reward": reward if reward is not None else 0.0, "terminated": bool(terminated), "truncated": bool(truncated),
            "info": info if info is not None else {}, "elapsed_ms": (time.perf_counter() - started) * 1000.0,
        }
        writer.add(step)
        if terminated or truncated:
            session.done, session.end_reason = True, end_reason
        # The reaper thread flushes (every ~0.2 s, as the engine does), so a step's round trip
        # touches no database; only a very long burst is flushed here.
        if len(writer.pending) >= FLUSH_EVERY_STEPS:
            writer.flush()
        return step


# -- close ---------------------------------------------------------------------------------------


def session_close(*, session: Session) -> Rollout:
    """Verify the final state, store the verifier's reward as the first label, finish the rollout."""
    with session.lock:
        if session.sandbox is None:
            return Rollout.objects.get(pk=session.rollout.pk)
        _close_locked(session)
    return Rollout.objects.get(pk=session.rollout.pk)


def _close_locked(session: Session, *, outcome: EpisodeOutcome | None = None) -> None:
    # Steps waiting on the lock see the sandbox gone and are refused; the entry leaves the registry only
    # once the rollout is finished, so whoever no longer finds it also finds the rollout's final state.
    sandbox, session.sandbox = session.sandbox, None
    try:
        if session.writer.pending:
            session.writer.flush()
        if outcome is None:
            outcome = _base_outcome(session.rollout, session.limits, sandbox)
            outcome.end_reason = session.end_reason or "closed"
            _verify(sandbox, sandbox.label, session.verify_timeout_s, session.writer, outcome)
            if outcome.end_reason == "idle_timeout":
                outcome.status, outcome.error = RolloutStatus.TIMED_OUT, f"the session was idle for more than {idle_timeout_s():g} s"
        outcome.step_count, outcome.total_reward = session.writer.step_count, session.writer.total_reward
        outcome.reproduction["sandbox"] = _public_facts(sandbox.facts)
    except Exception as exc:  # noqa: BLE001 - the rollout must end whatever went wrong here
        logger.exception("closing session %s failed", session.id)
        outcome = _base_outcome(session.rollout, session.limits, sandbox)
        outcome.error = f"internal error while closing the session: {exc!r}"
    finally:
        sandbox.close()
    try:
        _finish(session.rollout, outcome)
    finally:
        with _registry_lock:
            _sessions.pop(session.id, None)


def _base_outcome(rollout: Rollout, limits: dict, sandbox) -> EpisodeOutcome:
    version = rollout.run.environment_version
    outcome = EpisodeOutcome(status=RolloutStatus.ERRORED, end_reason="error")
    outcome.reproduction = {
        "environment": version.environment.slug, "version": version.label, "content_hash": version.content_hash,
        "task_id": rollout.task_id, "seed": rollout.seed, "repeat": rollout.repeat,
        "agent": {"name": rollout.run.agent.name, "kind": AgentKind.REMOTE}, "limits": limits,
        "entrypoint": version.manifest.get("entrypoint"), "session": True,
    }
    return outcome


def _failed_outcome(rollout, exc: SandboxError, reason: str, limits: dict, sandbox) -> EpisodeOutcome:
    outcome = _base_outcome(rollout, limits, sandbox)
    if isinstance(exc, SandboxTimeout):
        outcome.status, outcome.end_reason = RolloutStatus.TIMED_OUT, "timeout"
    outcome.error = reason
    return outcome


def _finish(rollout: Rollout, outcome: EpisodeOutcome) -> None:
    run_services._rollout_finish(rollout, outcome)


# -- the reaper ----------------------------------------------------------------------------------


def _ensure_reaper() -> None:
    global _reaper
    with _registry_lock:
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap_forever, name="session-reaper", daemon=True)
            _reaper.start()


def _reap_forever() -> None:
    """Runs while sessions are open: closes idle ones, flushes steps a paused client left buffered,
    keeps heartbeats fresh. Exits (closing its database connection) when none is left."""
    global _reaper
    try:
        while True:
            time.sleep(min(0.2, idle_timeout_s() / 4))
            with _registry_lock:
                if not _sessions:
                    _reaper = None
                    return
                open_now = list(_sessions.values())
            for session in open_now:
                try:
                    reap_once(session)
                except Exception:  # noqa: BLE001 - one bad session must not stop the reaper
                    logger.exception("session reaper failed on session %s", session.id)
    finally:
        connection.close()


def reap_once(session: Session, *, now: float | None = None) -> str:
    """What the reaper does for one session; returns "closed", "flushed", or ""."""
    now = time.monotonic() if now is None else now
    if not session.lock.acquire(blocking=False):
        return ""  # a step is in progress: it is not idle
    try:
        if session.sandbox is None:
            return ""
        if now - session.last_used > idle_timeout_s():
            session.end_reason = "idle_timeout"
            _close_locked(session)
            return "closed"
        if session.writer.pending and (session.done or session.writer.due()):
            session.writer.flush()
            session.last_beat = now
            return "flushed"
        if now - session.last_beat > HEARTBEAT_EVERY_S:
            Rollout.objects.filter(pk=session.rollout.pk).update(heartbeat_at=timezone.now())
            session.last_beat = now
        return ""
    finally:
        session.lock.release()


def close_orphaned_sessions(*, stale_s: float | None = None) -> list[int]:
    """Running remote rollouts no live process holds (their heartbeat stopped): end them errored."""
    stale_s = run_services.stale_after_s() if stale_s is None else stale_s
    cutoff = timezone.now() - timedelta(seconds=stale_s)
    held = {s.rollout.pk for s in list(_sessions.values())}
    ended = []
    for rollout in Rollout.objects.filter(
        status=RolloutStatus.RUNNING, run__agent__kind=AgentKind.REMOTE, heartbeat_at__lt=cutoff
    ).exclude(pk__in=held).select_related("run"):
        run_services._rollout_finish_with(
            rollout, status=RolloutStatus.ERRORED, end_reason="error",
            error="the server holding this session stopped before it was closed",
        )
        ended.append(rollout.pk)
    return ended
