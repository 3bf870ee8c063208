"""Play mode: an author acts as the agent of a browser environment from the studio page.

A play is a normal rollout of the team's `human` agent: its sandbox lives in this server process (a
registry keyed by play id, like a login session), every action is a step written and published as a
worker's are, and finishing runs the verifier. An idle play is closed by a reaper thread (timed_out).
"""
import dataclasses
import logging
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from studio.errors import DomainError

from . import events
from . import services as run_services
from .artifacts import ARTIFACT_KEY, artifact_store
from .engine import DEFAULT_VERIFY_TIMEOUT_S, EpisodeOutcome, StepWriter, _public_facts, _verify, describe_fault, effective_limits
from .models import AgentKind, Rollout, RolloutStatus, Run, RunStatus
from .sandbox import ProcessSandbox, SandboxError, SandboxLimits, SandboxTimeout
from .sandbox.process import BROWSER_CONFIG

logger = logging.getLogger(__name__)

HUMAN_AGENT_NAME = "human"
HEARTBEAT_EVERY_S = 2.0


def idle_timeout_s() -> float:
    """A play nobody acted in for this long is closed (its rollout ends timed_out)."""
    return float(getattr(settings, "PLAY_IDLE_TIMEOUT_S", None) or os.environ.get("PLAY_IDLE_TIMEOUT_S") or 900)


def max_plays() -> int:
    return int(getattr(settings, "PLAY_MAX_OPEN", None) or os.environ.get("PLAY_MAX_OPEN") or 8)


class InvalidPlay(DomainError):
    pass


class PlayNotFound(DomainError):
    status = 404


class PlayEnded(DomainError):
    status = 409


@dataclasses.dataclass
class Play:
    id: str
    team_id: int
    rollout: Rollout
    sandbox: ProcessSandbox | None
    writer: StepWriter
    limits: dict
    max_steps: int
    verify_timeout_s: float
    observation: dict | None = None
    artifact_url: str | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    last_beat: float = dataclasses.field(default_factory=time.monotonic)
    done: bool = False
    end_reason: str = ""


_plays: dict[str, Play] = {}
_registry_lock = threading.Lock()
# A sandbox dies with the thread that forked it (PR_SET_PDEATHSIG) and a request's thread is short-lived:
# every play's sandbox is forked from this one long-lived thread.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="play-spawn")
_reaper: threading.Thread | None = None


def play_start(*, team, actor, version, task_id: str, seed: int = 0) -> Play:
    """Start the browser sandbox for (version, task, seed) and record a running rollout of `human`."""
    if version.environment.team_id != team.pk:
        raise InvalidPlay("That environment version belongs to another team.", field="version")
    if version.manifest.get("kind") != "browser":
        raise InvalidPlay("Play mode is for browser environments.", field="version")
    task = next((t for t in version.tasks if str(t.get("id")) == str(task_id)), None)
    if task is None:
        raise InvalidPlay(f"Task {task_id!r} is not in {version.label}.", field="task_id")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InvalidPlay(f"The seed must be a whole number from 0 to 2^63-1, not {seed!r}.", field="seed")
    if len(_plays) >= max_plays():
        raise InvalidPlay(f"This server holds {max_plays()} open plays already; finish one first.")
    limits = effective_limits(version, {})
    agent = run_services.agent_get_or_create(team=team, actor=actor, name=HUMAN_AGENT_NAME, kind=AgentKind.HUMAN)
    play_id = secrets.token_urlsafe(16)
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.create(
            team=team, environment_version=version, agent=agent, task_ids=[str(task["id"])], seeds=[seed],
            limits={}, status=RunStatus.RUNNING, created_by=actor,
        )
        rollout = Rollout.objects.create(
            team=team, run=run, task_id=str(task["id"]), seed=seed, status=RolloutStatus.RUNNING, attempts=1,
            worker=f"{run_services.worker_identity()}:play-{play_id[:8]}", started_at=now, heartbeat_at=now,
        )
        transaction.on_commit(lambda: events.publish_rollout(rollout))
    sandbox = ProcessSandbox(BROWSER_CONFIG)
    try:
        _spawner.submit(sandbox.spawn).result()
        sandbox.start(
            version.files, mode="env", entrypoint=version.manifest["entrypoint"],
            limits=SandboxLimits.from_dict(limits).for_browser(),
        )
        observation = sandbox.reset(task, seed)
    except SandboxError as exc:
        sandbox.close()
        reason = describe_fault(sandbox.label, exc)
        run_services._rollout_finish(rollout, _failed_outcome(rollout, exc, reason, limits))
        raise PlayEnded(f"The environment did not start: {reason}") from None
    Rollout.objects.filter(pk=rollout.pk).update(initial_observation=observation)
    play = Play(
        id=play_id, team_id=team.pk, rollout=rollout, sandbox=sandbox, writer=StepWriter(rollout), limits=limits,
        max_steps=int(limits["max_steps"]), observation=observation,
        verify_timeout_s=float(limits.get("verify_timeout_s") or DEFAULT_VERIFY_TIMEOUT_S),
    )
    name = artifact_store(rollout_id=rollout.pk, index=0, artifact=sandbox.last_artifact, stem="reset")
    play.artifact_url = _url(name)
    with _registry_lock:
        _plays[play_id] = play
    _ensure_reaper()
    return play


def play_get(*, team, play_id: str) -> Play:
    play = _plays.get(play_id)
    if play is None or play.team_id != team.pk:
        raise PlayNotFound("No open play with this id (finished, idle too long, or held by another server).")
    return play


def play_act(*, play: Play, action: dict) -> dict:
    """One action as one step, stored (screenshot included) before it returns."""
    with play.lock:
        if play.sandbox is None:
            raise PlayNotFound("This play is finished.")
        if play.done:
            raise PlayEnded(f"The episode is over ({play.end_reason}); finish it to see the verifier's verdict.")
        play.last_used = time.monotonic()
        started = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info = play.sandbox.step(action)
        except SandboxError as exc:
            reason = describe_fault(play.sandbox.label, exc)
            _close_locked(play, outcome=_failed_outcome(play.rollout, exc, reason, play.limits))
            raise PlayEnded(f"The environment failed: {reason}") from None
        writer = play.writer
        index = writer.step_count
        end_reason = "terminated" if terminated else "truncated" if truncated else ""
        if not end_reason and index + 1 >= play.max_steps:
            truncated, end_reason = True, "max_steps"
        step = {
            "index": index, "action": action, "observation": observation,
            "reward": reward if reward is not None else 0.0, "terminated": bool(terminated), "truncated": bool(truncated),
            "info": info if info is not None else {}, "elapsed_ms": (time.perf_counter() - started) * 1000.0,
        }
        if play.sandbox.last_artifact:
            step[ARTIFACT_KEY] = play.sandbox.last_artifact
        writer.add(step)
        writer.flush()  # a person's pace: write each step at once, so its screenshot has a URL now
        play.last_beat = time.monotonic()
        play.observation = observation
        play.artifact_url = step.get("artifact_url") or play.artifact_url
        if end_reason:
            play.done, play.end_reason = True, end_reason
        return step


def play_finish(*, play: Play) -> Rollout:
    """Verify the final state (the verifier's reward becomes the first label) and end the rollout."""
    with play.lock:
        if play.sandbox is not None:
            _close_locked(play)
    return Rollout.objects.get(pk=play.rollout.pk)


def _close_locked(play: Play, *, outcome: EpisodeOutcome | None = None) -> None:
    # Actions waiting on the lock see the sandbox gone and are refused; the entry leaves the registry only
    # once the rollout is finished, so whoever no longer finds it also finds the rollout's final state.
    sandbox, play.sandbox = play.sandbox, None
    try:
        if play.writer.pending:
            play.writer.flush()
        if outcome is None:
            outcome = _base_outcome(play.rollout, play.limits)
            outcome.end_reason = play.end_reason or "finished"
            _verify(sandbox, sandbox.label, play.verify_timeout_s, play.writer, outcome)
            if outcome.end_reason == "idle_timeout":
                outcome.status = RolloutStatus.TIMED_OUT
                outcome.error = f"nobody acted in this play for more than {idle_timeout_s():g} s"
        outcome.step_count, outcome.total_reward = play.writer.step_count, play.writer.total_reward
        outcome.reproduction["sandbox"] = _public_facts(sandbox.facts)
    except Exception as exc:  # noqa: BLE001 - the rollout must end whatever went wrong here
        logger.exception("finishing play %s failed", play.id)
        outcome = _base_outcome(play.rollout, play.limits)
        outcome.error = f"internal error while finishing the play: {exc!r}"
    finally:
        sandbox.close()
    try:
        run_services._rollout_finish(play.rollout, outcome)
    finally:
        with _registry_lock:
            _plays.pop(play.id, None)


def _base_outcome(rollout: Rollout, limits: dict) -> EpisodeOutcome:
    version = rollout.run.environment_version
    outcome = EpisodeOutcome(status=RolloutStatus.ERRORED, end_reason="error")
    outcome.reproduction = {
        "environment": version.environment.slug, "version": version.label, "content_hash": version.content_hash,
        "task_id": rollout.task_id, "seed": rollout.seed, "repeat": rollout.repeat,
        "agent": {"name": rollout.run.agent.name, "kind": AgentKind.HUMAN}, "limits": limits,
        "entrypoint": version.manifest.get("entrypoint"), "play": True,
    }
    return outcome


def _failed_outcome(rollout, exc: SandboxError, reason: str, limits: dict) -> EpisodeOutcome:
    outcome = _base_outcome(rollout, limits)
    if isinstance(exc, SandboxTimeout):
        outcome.status, outcome.end_reason = RolloutStatus.TIMED_OUT, "timeout"
    outcome.error = reason
    return outcome


def _url(name: str | None) -> str | None:
    if not name:
        return None
    from django.core.files.storage import default_storage

    return default_storage.url(name)


# -- the reaper: heartbeats while a person thinks, and an end for forgotten plays -------------------


def _ensure_reaper() -> None:
    global _reaper
    with _registry_lock:
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap_forever, name="play-reaper", daemon=True)
            _reaper.start()


def _reap_forever() -> None:
    global _reaper
    try:
        while True:
            time.sleep(0.5)
            with _registry_lock:
                if not _plays:
                    _reaper = None
                    return
                open_now = list(_plays.values())
            for play in open_now:
                try:
                    reap_once(play)
                except Exception:  # noqa: BLE001 - one bad play must not stop the reaper
                    logger.exception("play reaper failed on play %s", play.id)
    finally:
        connection.close()


def reap_once(play: Play, *, now: float | None = None) -> str:
    """Close an idle play ("closed") or refresh its heartbeat; "" when nothing was due."""
    now = time.monotonic() if now is None else now
    if not play.lock.acquire(blocking=False):
        return ""
    try:
        if play.sandbox is None:
            return ""
        if now - play.last_used > idle_timeout_s():
            play.end_reason = "idle_timeout"
            _close_locked(play)
            return "closed"
        if now - play.last_beat > HEARTBEAT_EVERY_S:
            Rollout.objects.filter(pk=play.rollout.pk).update(heartbeat_at=timezone.now())
            play.last_beat = now
        return ""
    finally:
        play.lock.release()
