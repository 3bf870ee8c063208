"""The life of one episode, the same for every driver: start -> step ... -> finish (or fail).

Worker rollouts (runs/episodes/engine.py), human play and remote sessions (held by episode hosts,
runs/episodes/hosts.py) all drive an episode through these functions, so browser environments,
screenshots, limits, the verifier's own budget and the final state are the same by construction.
Every function that ends an episode closes its sandbox and writes the rollout's final state (and
the verifier's first label) itself; a driver only decides when.
"""
import contextlib
import dataclasses
import json
import logging
import math
import threading
import time

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ..action_names import action_names
from ..artifacts import ARTIFACT_KEY, artifact_store, artifact_url, arrays_store
from ..curriculum.stats import counted_params, counted_sql
from ..figures import rollout_succeeded
from ..models import LabelDecision, LabelSource, RewardLabel, Rollout, RolloutStatus, Step
from ..sandbox import DEFAULT_CONFIG, Sandbox, SandboxError, SandboxTimeout, UserCodeError
from ..sandbox.backends import sandbox_for
from ..sandbox.shared import EpisodeLease, SharedKey, shared_sandboxes
from .setup import EpisodeSetup
from .status import rollout_status_changed
from .writer import LostOwnership, StepWriter

logger = logging.getLogger(__name__)

# Sandbox facts that describe the episode's conditions (not this host's pids and uids).
PUBLIC_SANDBOX_FACTS = ("backend", "python", "numpy", "gymnasium", "network_isolated", "limits", "pooled", "mode",
                        "entrypoint", "notes", "shared", "capacity", "isolation")


class EpisodeFault(Exception):
    """The episode cannot go on; `status` is errored, timed_out or cancelled and `reason` is readable.
    When a service raises it, the rollout's final state is already written."""

    def __init__(self, status: str, reason: str, end_reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.end_reason = end_reason


class EpisodeOver(Exception):
    """A step was asked of an episode that already ended (terminated, truncated or max_steps)."""


def describe_fault(label: str, exc: SandboxError) -> str:
    """'env.py step() raised ValueError: boom (env.py line 12)'; crashes and timeouts say it already."""
    if isinstance(exc, UserCodeError):
        op = f"{exc.op}()" if exc.op else "call"
        if exc.kind == "exception":
            return f"{label} {op} raised {exc.message}"
        return f"{label} {op}: {exc.message}"
    return str(exc)


def fault_of(label: str, exc: SandboxError) -> EpisodeFault:
    if isinstance(exc, SandboxTimeout):
        return EpisodeFault(RolloutStatus.TIMED_OUT, describe_fault(label, exc), "timeout")
    return EpisodeFault(RolloutStatus.ERRORED, describe_fault(label, exc), "error")


def public_facts(facts: dict) -> dict:
    return {key: facts[key] for key in PUBLIC_SANDBOX_FACTS if key in facts}


@dataclasses.dataclass
class EpisodeOutcome:
    """How an episode ended, as its rollout row stores it."""

    status: str
    end_reason: str
    error: str = ""
    total_reward: float = 0.0
    step_count: int = 0
    verifier_reward: float | None = None
    verifier_reason: str = ""
    verifier_error: str = ""
    # What the first label proposes: the verifier's reward, or the total reward when there is no verifier.
    proposed_value: float | None = None
    proposed_rationale: str = ""
    reproduction: dict = dataclasses.field(default_factory=dict)


class Episode:
    """One started episode: its sandbox, its step writer and where it stands. Not thread-safe by
    itself: a driver that serves it from several threads holds `lock` around each call."""

    def __init__(self, setup: EpisodeSetup, sandbox: "Sandbox | EpisodeLease"):
        self.setup = setup
        self.rollout = setup.rollout
        self.sandbox = sandbox
        self.writer = StepWriter(setup.rollout)
        self.observation = None
        self.info: dict = {}
        self.reset_info: dict = {}
        self.done = False
        self.end_reason = ""
        self.finished = False
        self.artifact_url: str | None = None
        self.lock = threading.Lock()
        # Set by episode_interrupt (another thread): how the episode ends once its pending call returns.
        self.interruption: "EpisodeFault | None" = None

    @property
    def label(self) -> str:
        return self.sandbox.label

    @property
    def tools(self) -> list:
        return self.sandbox.tools or []

    @property
    def action_space(self):
        return self.sandbox.action_space

    @property
    def observation_space(self) -> dict | None:
        """The description of its observations the environment reported (`observation_space`), if any."""
        return self.sandbox.observation_space

    @property
    def action_schema(self) -> dict | None:
        """The JSON schema of the environment's object actions (`action_schema`), when it declares one."""
        return self.sandbox.action_schema

    @property
    def env_state(self) -> dict | None:
        """The environment's own `state()` after its last reset or step (None when it has none)."""
        return self.sandbox.env_state


# -- sandboxes by kind ----------------------------------------------------------------------------

_browser_pool = None
_browser_pool_lock = threading.Lock()


def browser_sandbox() -> Sandbox:
    """A browser sandbox, from this process's pool of ones whose Chromium is already running
    (settings.BROWSER_POOL_SIZE; 0 starts each cold)."""
    from ..sandbox import ProcessSandbox
    from ..sandbox.pool import SandboxPool
    from ..sandbox.config import BROWSER_CONFIG, BROWSER_WARM_CONFIG

    global _browser_pool
    size = int(getattr(settings, "BROWSER_POOL_SIZE", 0))
    if size <= 0:
        return ProcessSandbox(BROWSER_CONFIG)
    with _browser_pool_lock:
        if _browser_pool is None:
            _browser_pool = SandboxPool(size=size, config=BROWSER_WARM_CONFIG)
        return _browser_pool.acquire()


def close_browser_pool() -> None:
    """Stop the idle pooled browsers (tests that count Chromium processes call this)."""
    global _browser_pool
    with _browser_pool_lock:
        if _browser_pool is not None:
            _browser_pool.close()
            _browser_pool = None


def episode_sandbox(setup: EpisodeSetup) -> "Sandbox | EpisodeLease":
    """The sandbox an episode of this set-up runs in: browser environments need Chromium, which only
    the process backend hosts; versions with `concurrent_sessions > 1` share runner processes;
    others get a sandbox of their own from the configured backend."""
    if setup.kind == "browser":
        if setup.python_path is not None:  # the warm pool imports from the studio's path
            from ..sandbox import ProcessSandbox
            from ..sandbox.config import BROWSER_CONFIG

            return ProcessSandbox(setup.sandbox_config(BROWSER_CONFIG))
        return browser_sandbox()
    if setup.concurrent_sessions > 1:
        # The version declares its episodes may share a runner process (one instance each).
        version = setup.version
        return shared_sandboxes.sandbox(
            key=SharedKey(team_id=version.environment.team_id, content_hash=version.content_hash, label=version.label),
            capacity=setup.concurrent_sessions, backend=settings.SANDBOX_BACKEND, episode=f"rollout-{setup.rollout.pk}",
            config=setup.sandbox_config(DEFAULT_CONFIG),
        )
    return sandbox_for(settings.SANDBOX_BACKEND, setup.sandbox_config(DEFAULT_CONFIG))


# -- start, step ----------------------------------------------------------------------------------


def episode_start(*, setup: EpisodeSetup, sandbox=None) -> Episode:
    """Start the episode's sandbox (`sandbox`: one the driver chose, e.g. from its pool) and reset
    it; the first observation (and a browser's first screenshot) is stored. Call it from a thread
    that lives as long as the episode: a sandbox dies with the thread that forked it. On failure
    the rollout is ended with the reason and EpisodeFault raised."""
    rollout = setup.rollout
    if setup.task is None or setup.refusal:
        reason = setup.refusal or f"task {rollout.task_id!r} is not in {setup.version.label}"
        fault = EpisodeFault(RolloutStatus.ERRORED, reason, "error")
        _write_final(rollout, _outcome(setup, fault.status, fault.end_reason, error=fault.reason))
        raise fault
    sandbox = sandbox if sandbox is not None else episode_sandbox(setup)
    episode = Episode(setup, sandbox)
    label = "env.py"
    try:
        limits = setup.sandbox_limits.for_browser() if setup.kind == "browser" else setup.sandbox_limits
        sandbox.start(setup.version.files, mode="env", entrypoint=setup.entrypoint, limits=limits)
        label = sandbox.label
        observation = sandbox.reset(setup.task, setup.seed)
    except SandboxError as exc:
        raise episode_fail(episode=episode, fault=fault_of(label, exc)) from None
    episode.observation = observation
    episode.reset_info = sandbox.reset_info or {}
    reset_info = arrays_store(rollout_id=rollout.pk, stem="reset-info", value=episode.reset_info)  # the row's form
    # The tools the environment itself reported (not only its manifest): exports offer them as the tool list.
    setup.reproduction["tools"] = sandbox.tools or []
    # What its actions are called (runs/action_names.py): the replay shows them by name.
    names = action_names(manifest=setup.version.manifest, action_space=sandbox.action_space)
    if names:
        setup.reproduction["action_names"] = names
    initial_observation = arrays_store(rollout_id=rollout.pk, stem="reset", value=observation)
    if setup.reproduction.get("driver") == "worker":
        episode.writer.set_initial(initial_observation, reset_info)  # stored by the first flush: no round trip of its own
    else:
        Rollout.objects.filter(pk=rollout.pk).update(initial_observation=initial_observation, reset_info=reset_info)
    artifact = sandbox.last_artifact
    if artifact:
        episode.artifact_url = artifact_url(artifact_store(rollout_id=rollout.pk, index=0, artifact=artifact, stem="reset"))
    return episode


def episode_step(*, episode: Episode, action, agent_record: dict | None = None) -> dict:
    """One environment step, added to the episode's writer (flushed when due). The version's
    max_steps truncates the episode at its last allowed step. A sandbox fault ends the episode
    (rollout written) and raises EpisodeFault; a step after the end raises EpisodeOver."""
    if episode.finished:
        raise EpisodeOver("This episode is finished.")
    if episode.done:
        raise EpisodeOver(f"The episode is over ({episode.end_reason}).")
    sandbox, writer = episode.sandbox, episode.writer
    started = time.perf_counter()
    try:
        observation, reward, terminated, truncated, info = sandbox.step(action)
    except SandboxError as exc:
        raise episode_fail(episode=episode, fault=episode.interruption or fault_of(episode.label, exc)) from None
    if reward is None:
        # The runner sends a NaN or infinite reward as null: refuse it rather than store a 0.0 nobody chose.
        raise episode_fail(episode=episode, fault=EpisodeFault(
            RolloutStatus.ERRORED, f"{episode.label} step() returned a reward that is not a finite number (NaN or infinity)", "error",
        ))
    index = writer.step_count
    info = info if info is not None else {}
    if agent_record:
        info = {**info, "agent": agent_record} if isinstance(info, dict) else {"env_info": info, "agent": agent_record}
    terminated, truncated = bool(terminated), bool(truncated)
    observation_error = sandbox.observation_error
    if observation_error:
        # Over the version's observation limit: the step is recorded with the reason (the agent
        # cannot act without its observation), then the episode ends errored, saying why.
        info = {**info, "observation_error": observation_error} if isinstance(info, dict) else {"env_info": info, "observation_error": observation_error}
    if terminated or truncated:
        episode.done, episode.end_reason = True, "terminated" if terminated else "truncated"
    elif index + 1 >= episode.setup.max_steps:
        truncated = True  # the studio's own step limit cut the episode: its last step says so
        episode.done, episode.end_reason = True, "max_steps"
    step = {
        "index": index,
        "action": action,
        "observation": observation,
        "reward": reward,
        "terminated": terminated,
        "truncated": truncated,
        "info": info,
        "elapsed_ms": (time.perf_counter() - started) * 1000.0,
    }
    artifact = sandbox.last_artifact
    if artifact:
        step[ARTIFACT_KEY] = artifact
    writer.add(step)
    episode.observation, episode.info = observation, info
    if observation_error:
        raise episode_fail(episode=episode, fault=EpisodeFault(
            RolloutStatus.ERRORED, f"{episode.label} step {index}: {observation_error}", "error"))
    return step


def episode_reject_action(*, episode: Episode, action, reason: str, agent_record: dict | None = None) -> dict:
    """A malformed action is a step of its own: recorded with the reason, the environment never sees it."""
    info = {"agent_error": reason, **({"agent": agent_record} if agent_record else {})}
    step = {"index": episode.writer.step_count, "action": action, "observation": episode.observation, "reward": 0.0,
            "terminated": False, "truncated": False, "info": info, "elapsed_ms": 0.0}
    episode.writer.add(step)
    episode.info = info
    return step


def episode_interrupt(*, episode: Episode, fault: EpisodeFault, sandboxes=()) -> None:
    """End the episode from another thread (a cancel) without waiting for the call it is in: its
    sandbox (and `sandboxes`, e.g. the agent's) are killed, so a hung step returns at once and the
    driver ends the episode with `fault`. Sandboxes shared with other episodes are left running
    (a lease's interrupt kills nothing: the episode ends at its next call)."""
    if episode.finished or episode.interruption is not None:
        return
    episode.interruption = fault
    for sandbox in (episode.sandbox, *sandboxes):
        try:
            sandbox.interrupt()
        except Exception:  # noqa: BLE001 - the driver still ends the episode at its next call
            logger.exception("interrupting a sandbox of rollout %s failed", episode.rollout.pk)


def episode_flush(*, episode: Episode) -> None:
    """Write the episode's buffered steps now (a person's pace: each step's screenshot gets its URL)."""
    episode.writer.flush()


# -- finish, fail ---------------------------------------------------------------------------------


def episode_finish(*, episode: Episode, end_reason: str = "", timed_out_reason: str = "") -> Rollout:
    """Verify the final state with the verifier's own budget, store the first label and end the
    rollout. `timed_out_reason` ends it timed_out (an idle session) after verifying what was done."""
    if episode.finished:
        return Rollout.objects.get(pk=episode.rollout.pk)
    setup = episode.setup
    end_reason = episode.end_reason or end_reason or "finished"
    try:
        episode.writer.flush()
        outcome = _outcome(setup, RolloutStatus.ERRORED, end_reason)
        _verify(episode, outcome)
        if episode.interruption is not None:  # cancelled while verifying
            fault = episode.interruption
            outcome = _outcome(setup, fault.status, fault.end_reason, error=fault.reason)
        if timed_out_reason:
            outcome.status, outcome.error = RolloutStatus.TIMED_OUT, timed_out_reason
    except LostOwnership:
        _close_sandbox(episode)
        raise
    except Exception as exc:  # noqa: BLE001 - the rollout must end whatever went wrong while finishing
        logger.exception("finishing episode of rollout %s failed", episode.rollout.pk)
        outcome = _outcome(setup, RolloutStatus.ERRORED, "error", error=f"internal error while finishing the episode: {exc!r}")
    return _end(episode, outcome)


def episode_fail(*, episode: Episode, fault: EpisodeFault) -> EpisodeFault:
    """End the episode with the fault's status and reason: steps taken so far are kept, the sandbox
    closed, the rollout written. Returns the fault, so a driver can `raise episode_fail(...)`."""
    if not episode.finished:
        try:
            if fault.end_reason == "timeout":
                _truncate_last_step(episode)
            if episode.writer.unwritten:
                episode.writer.flush()
        except LostOwnership:
            _close_sandbox(episode)
            raise
        except Exception:  # noqa: BLE001 - a dead database must not keep the sandbox or the rollout open
            logger.exception("flushing the last steps of rollout %s failed", episode.rollout.pk)
        _end(episode, _outcome(episode.setup, fault.status, fault.end_reason, error=fault.reason))
    return fault


def _truncate_last_step(episode: Episode) -> None:
    """The time limit cut the episode: its last recorded step says truncated, as Gymnasium's
    TimeLimit would (a learner bootstraps from it rather than treating it as terminal)."""
    writer = episode.writer
    if writer.pending:
        last = writer.pending[-1]
        last["truncated"] = last["truncated"] or not last["terminated"]
    elif writer.step_count:
        Step.objects.filter(rollout_id=episode.rollout.pk, index=writer.step_count - 1, terminated=False).update(truncated=True)


def _end(episode: Episode, outcome: EpisodeOutcome) -> Rollout:
    episode.finished = True
    outcome.step_count, outcome.total_reward = episode.writer.step_count, episode.writer.total_reward
    outcome.reproduction["sandbox"] = public_facts(episode.sandbox.facts or {})
    _close_sandbox(episode)
    return _write_final(episode.rollout, outcome)


def _close_sandbox(episode: Episode) -> None:
    try:
        episode.sandbox.close()
    except Exception:  # noqa: BLE001 - a sandbox that will not close must not keep the rollout open
        logger.exception("closing the sandbox of rollout %s failed", episode.rollout.pk)


def _outcome(setup: EpisodeSetup, status: str, end_reason: str, *, error: str = "") -> EpisodeOutcome:
    return EpisodeOutcome(status=status, end_reason=end_reason, error=error, reproduction=dict(setup.reproduction))


def _verify(episode: Episode, outcome: EpisodeOutcome) -> None:
    setup, sandbox, writer = episode.setup, episode.sandbox, episode.writer
    try:
        # The verifier has its own budget: the episode clock must not cut it short.
        reward, reason = sandbox.verify(timeout=setup.verify_timeout_s)
    except SandboxError as exc:
        if isinstance(exc, SandboxTimeout):
            text = f"{episode.label} verify() did not answer within verify_timeout_s={setup.verify_timeout_s:g} s"
        else:
            text = describe_fault(episode.label, exc)
        outcome.verifier_error = text
        outcome.status = RolloutStatus.ERRORED
        outcome.error = f"verifier failed: {text}"
        return
    succeeded = rollout_succeeded(setup.version.manifest.get("success"), verifier_reward=reward, total_reward=writer.total_reward)
    if reward is None:
        outcome.verifier_reason = reason
        outcome.status = RolloutStatus.SUCCEEDED if succeeded else RolloutStatus.FAILED
        outcome.proposed_value = writer.total_reward
        outcome.proposed_rationale = f"{reason}: proposed from the episode's total reward"
        return
    outcome.verifier_reward, outcome.verifier_reason = reward, reason
    outcome.status = RolloutStatus.SUCCEEDED if succeeded else RolloutStatus.FAILED
    outcome.proposed_value = reward
    outcome.proposed_rationale = reason


def _write_final(rollout: Rollout, outcome: EpisodeOutcome) -> Rollout:
    if rollout_finish(rollout=rollout, outcome=outcome):
        return rollout  # holds what was written
    return Rollout.objects.get(pk=rollout.pk)


# -- the rollout's final state --------------------------------------------------------------------


STORABLE_NOTE = " [NUL characters or unpaired surrogates replaced with U+FFFD]"


def storable_text(text: str) -> tuple[str, bool]:
    """Text PostgreSQL can store (NUL characters and unpaired surrogates replaced), and whether it changed."""
    cleaned = text.replace("\x00", "\ufffd")
    try:
        cleaned.encode("utf-8")
    except UnicodeEncodeError:
        cleaned = "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in cleaned)
    return cleaned, cleaned != text


def _storable_outcome(outcome: EpisodeOutcome) -> None:
    for field in ("error", "verifier_reason", "verifier_error", "proposed_rationale"):
        text, changed = storable_text(getattr(outcome, field) or "")
        setattr(outcome, field, text + STORABLE_NOTE if changed else text)
    document = json.dumps(outcome.reproduction, ensure_ascii=True, default=str)
    if "\\u0000" in document:  # jsonb cannot store it either
        outcome.reproduction = json.loads(document.replace("\\u0000", "\\ufffd"))


def rollout_finish(*, rollout: Rollout, outcome: EpisodeOutcome) -> bool:
    """Write how the episode ended and the verifier's first label, fenced by the attempt: a rollout
    that is no longer this attempt's (or no longer running) is left alone. True when written.

    Text the database cannot hold is made storable (and says so); should the write fail anyway, the
    rollout still ends, errored with the reason: a finishing write never leaves it running."""
    _storable_outcome(outcome)
    try:
        return _rollout_finish_write(rollout, outcome)
    except (DatabaseError, ValueError) as exc:
        logger.exception("storing the outcome of rollout %s failed", rollout.pk)
        fallback = EpisodeOutcome(
            status=RolloutStatus.ERRORED, end_reason="error", step_count=outcome.step_count,
            total_reward=outcome.total_reward if math.isfinite(outcome.total_reward) else 0.0,
            error=f"the episode ended ({outcome.status}) but its outcome could not be stored: {type(exc).__name__}",
        )
        return _rollout_finish_write(rollout, fallback)


_FINISH_SQL = f"""
    WITH done AS (
        UPDATE {Rollout._meta.db_table} SET status = %(status)s, end_reason = %(end_reason)s, error = %(error)s,
            total_reward = %(total_reward)s, step_count = %(step_count)s, verifier_reward = %(verifier_reward)s,
            verifier_reason = %(verifier_reason)s, verifier_error = %(verifier_error)s,
            reproduction = %(reproduction)s::jsonb, finished_at = now(), heartbeat_at = now()
        WHERE id = %(rollout)s AND attempts = %(attempts)s AND status = %(running)s
        RETURNING id, team_id, run_id, task_id, status, total_reward, step_count, started_at, finished_at
    ), counted AS ({counted_sql("done")}
    ), label AS (
        INSERT INTO {RewardLabel._meta.db_table} (team_id, rollout_id, step_id, source, value, decision, reviewer_id, rationale, created_at)
        SELECT team_id, id, NULL, %(source)s, %(value)s, %(decision)s, NULL, %(rationale)s, now() FROM done
        WHERE %(has_label)s
    )
    SELECT finished_at FROM done
"""


def _rollout_finish_write(rollout: Rollout, outcome: EpisodeOutcome) -> bool:
    """The outcome and the verifier's first label in one statement (so both or neither are written),
    fenced by the attempt; the in-memory rollout gets what was written."""
    error = outcome.error[:10000]
    # Inside a caller's transaction a savepoint keeps a failed write from spoiling it (the fallback
    # write must still work); on its own the statement is its own transaction (outcome, first label and
    # task statistics together).
    with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext(), connection.cursor() as cursor:
        cursor.execute(_FINISH_SQL, {
            "status": outcome.status, "end_reason": outcome.end_reason, "error": error,
            "total_reward": outcome.total_reward, "step_count": outcome.step_count,
            "verifier_reward": outcome.verifier_reward, "verifier_reason": outcome.verifier_reason,
            "verifier_error": outcome.verifier_error, "reproduction": json.dumps(outcome.reproduction, default=str),
            "rollout": rollout.pk, "attempts": rollout.attempts, "running": RolloutStatus.RUNNING,
            "source": LabelSource.VERIFIER, "value": outcome.proposed_value, "decision": LabelDecision.PROPOSED,
            "rationale": outcome.proposed_rationale, "has_label": outcome.proposed_value is not None, **counted_params(),
        })
        row = cursor.fetchone()
    if row is None:
        return False
    rollout.status, rollout.end_reason, rollout.error = outcome.status, outcome.end_reason, error
    rollout.total_reward, rollout.step_count = outcome.total_reward, outcome.step_count
    rollout.verifier_reward, rollout.verifier_reason = outcome.verifier_reward, outcome.verifier_reason
    rollout.verifier_error, rollout.reproduction = outcome.verifier_error, outcome.reproduction
    rollout.finished_at = rollout.heartbeat_at = row[0]
    rollout_status_changed(rollout)
    return True


def rollout_end(*, rollout: Rollout, status: str, error: str, end_reason: str) -> bool:
    """End a running rollout without an episode outcome (its driver died, a worker bug)."""
    error, _ = storable_text(error)
    with transaction.atomic():
        updated = Rollout.objects.filter(pk=rollout.pk, attempts=rollout.attempts, status=RolloutStatus.RUNNING).update(
            status=status, error=error[:10000], end_reason=end_reason, finished_at=timezone.now()
        )
        if updated:
            rollout.refresh_from_db()
            rollout_status_changed(rollout)
    return bool(updated)
