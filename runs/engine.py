"""The rollout loop: one episode of an agent in an environment version's sandbox.

`run_episode` starts the env sandbox (and the scripted agent's own sandbox), loops act -> step until
the episode ends, writes steps in batches (publishing each batch live), then asks the verifier
with its own time budget. It returns an `EpisodeOutcome`; services.py writes the final state.
"""
import dataclasses
import json
import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from . import events
from .artifacts import ARTIFACT_KEY, artifacts_store_for_steps
from .agents import AgentDone, AgentFailed, AgentStepError, policy_for
from .models import Rollout, RolloutStatus, RunStatus, Step
from .sandbox.backends import sandbox_for
from .sandbox.pool import SandboxPool
from .sandbox.process import BROWSER_CONFIG, BROWSER_WARM_CONFIG
from .sandbox import ProcessSandbox, SandboxCrashed, SandboxError, SandboxLimits, SandboxTimeout, UserCodeError

logger = logging.getLogger(__name__)

FLUSH_EVERY_S = 0.2
FLUSH_EVERY_STEPS = 1000
CANCEL_CHECK_EVERY_S = 0.5
HEARTBEAT_EVERY_S = 1.0
# Run limits a run may set on top of the version's [limits] table.
RUN_LIMIT_KEYS = ("step_timeout_s", "episode_timeout_s", "verify_timeout_s", "memory_mb", "max_steps")
DEFAULT_VERIFY_TIMEOUT_S = 30.0


class LostOwnership(Exception):
    """Another worker took this rollout over (ours was presumed dead); stop without writing more."""


class EpisodeCancelled(Exception):
    pass


class EpisodeFault(Exception):
    """The episode cannot go on; `status` is errored or timed_out and `reason` is readable."""

    def __init__(self, status: str, reason: str, end_reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.end_reason = end_reason


@dataclasses.dataclass
class EpisodeOutcome:
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


def effective_limits(version, run_limits: dict | None) -> dict:
    """The version's [limits] with the run's overrides on top, plus max_steps."""
    limits = dict(version.manifest.get("limits") or {})
    limits["max_steps"] = version.manifest.get("max_steps", 200)
    for key, value in (run_limits or {}).items():
        if key in RUN_LIMIT_KEYS and value is not None:
            limits[key] = value
    return limits


def agent_view_of(task: dict, hidden_fields) -> dict:
    """The task as the agent may see it: the version's hidden fields (e.g. the answer) removed."""
    hidden = set(hidden_fields or ())
    return {key: value for key, value in task.items() if key not in hidden}


def describe_fault(label: str, exc: SandboxError) -> str:
    """'env.py step() raised ValueError: boom (env.py line 12)'; crashes and timeouts say it already."""
    if isinstance(exc, UserCodeError):
        op = f"{exc.op}()" if exc.op else "call"
        if exc.kind == "exception":
            return f"{label} {op} raised {exc.message}"
        return f"{label} {op}: {exc.message}"
    return str(exc)


def _fault(label: str, exc: SandboxError) -> EpisodeFault:
    if isinstance(exc, SandboxTimeout):
        return EpisodeFault(RolloutStatus.TIMED_OUT, describe_fault(label, exc), "timeout")
    return EpisodeFault(RolloutStatus.ERRORED, describe_fault(label, exc), "error")


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

    def due(self) -> bool:
        return len(self.pending) >= FLUSH_EVERY_STEPS or time.monotonic() - self.last_flush >= FLUSH_EVERY_S

    def flush(self) -> None:
        self.last_flush = time.monotonic()
        if not self.pending:
            return
        steps, self.pending = self.pending, []
        artifacts_store_for_steps(self.rollout.pk, steps)  # screenshots go to media storage, not the row
        _insert_steps(self.rollout.pk, steps)
        updated = Rollout.objects.filter(pk=self.rollout.pk, attempts=self.attempt, status=RolloutStatus.RUNNING).update(
            step_count=self.step_count, total_reward=self.total_reward, heartbeat_at=timezone.now()
        )
        if not updated:
            raise LostOwnership(f"rollout {self.rollout.pk} is no longer ours (attempt {self.attempt})")
        events.publish_steps(self.rollout, steps)


_STEP_TABLE = Step._meta.db_table
_INSERT_STEPS_SQL = f"""
    INSERT INTO {_STEP_TABLE} (rollout_id, "index", action, observation, reward, terminated, truncated, info, elapsed_ms, artifact, created_at)
    SELECT %s, s."index", s.action, s.observation, s.reward, s.terminated, s.truncated, COALESCE(s.info, '{{}}'::jsonb), s.elapsed_ms, s.artifact, now()
    FROM jsonb_to_recordset(%s::jsonb) AS s(
        "index" integer, action jsonb, observation jsonb, reward double precision,
        terminated boolean, truncated boolean, info jsonb, elapsed_ms double precision, artifact varchar)
    ON CONFLICT (rollout_id, "index") DO NOTHING
"""


def _insert_steps(rollout_id: int, steps: list[dict]) -> None:
    """One statement per batch: the batch travels as one JSON document (Django's bulk_create spends
    ~4x longer building model instances and per-value parameters). ON CONFLICT keeps a redelivered
    or racing attempt from ever duplicating a step index."""
    document = json.dumps(steps, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if "\\u0000" in document:
        document = document.replace("\\u0000", "\\ufffd")  # PostgreSQL jsonb cannot store NUL characters
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_STEPS_SQL, [rollout_id, document])


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


class CancelCheck:
    """Re-reads the rollout's and its run's status at most every CANCEL_CHECK_EVERY_S."""

    def __init__(self, rollout: Rollout):
        self.rollout_id = rollout.pk
        self.last = time.monotonic()

    def cancelled(self, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and now - self.last < CANCEL_CHECK_EVERY_S:
            return False
        self.last = now
        row = Rollout.objects.filter(pk=self.rollout_id).values_list("status", "run__status").first()
        return row is None or row[0] == RolloutStatus.CANCELLED or row[1] == RunStatus.CANCELLED


_browser_pool: SandboxPool | None = None


def browser_sandbox() -> ProcessSandbox:
    """A browser sandbox, from this process's pool of ones whose Chromium is already running
    (settings.BROWSER_POOL_SIZE; 0 starts each cold)."""
    global _browser_pool
    size = int(getattr(settings, "BROWSER_POOL_SIZE", 0))
    if size <= 0:
        return ProcessSandbox(BROWSER_CONFIG)
    if _browser_pool is None:
        _browser_pool = SandboxPool(size=size, config=BROWSER_WARM_CONFIG)
    return _browser_pool.acquire()


def close_browser_pool() -> None:
    """Stop the idle pooled browsers (tests that count Chromium processes call this)."""
    global _browser_pool
    if _browser_pool is not None:
        _browser_pool.close()
        _browser_pool = None


def run_episode(rollout: Rollout) -> EpisodeOutcome:
    """Play one episode of `rollout` (claimed and running); return how it ended. Never raises for
    faults of user code or sandboxes; raises LostOwnership if another worker took the rollout over."""
    run = rollout.run
    version = run.environment_version
    agent = run.agent
    manifest = version.manifest
    limits = effective_limits(version, run.limits)
    sandbox_limits = SandboxLimits.from_dict(limits)
    max_steps = int(limits["max_steps"])
    verify_timeout_s = float(limits.get("verify_timeout_s") or DEFAULT_VERIFY_TIMEOUT_S)
    task = next((t for t in version.tasks if str(t.get("id")) == rollout.task_id), None)
    outcome = EpisodeOutcome(status=RolloutStatus.ERRORED, end_reason="error")
    outcome.reproduction = {
        "environment": version.environment.slug,
        "version": version.label,
        "content_hash": version.content_hash,
        "task_id": rollout.task_id,
        "seed": rollout.seed,
        "repeat": rollout.repeat,
        "agent": {"name": agent.name, "kind": agent.kind, "code_hash": agent.code_hash, "config": agent.config},
        "limits": limits,
        "entrypoint": manifest.get("entrypoint"),
    }
    if task is None:
        outcome.error = f"task {rollout.task_id!r} is not in {version.label}"
        return outcome

    writer = StepWriter(rollout)
    cancel = CancelCheck(rollout)
    # Browser environments need Chromium, which only the process backend hosts.
    env = browser_sandbox() if manifest.get("kind") == "browser" else sandbox_for(settings.SANDBOX_BACKEND)
    policy = policy_for(agent, seed=rollout.seed)
    try:
        with Heartbeat(rollout):
            _play(rollout, env, policy, task, manifest, sandbox_limits, max_steps, verify_timeout_s, writer, cancel, outcome)
    finally:
        policy.close()
        env.close()
        outcome.reproduction["sandbox"] = _public_facts(env.facts)
        if policy.facts:
            outcome.reproduction["agent_sandbox"] = _public_facts(policy.facts)
    return outcome


def _play(rollout, env, policy, task, manifest, limits, max_steps, verify_timeout_s, writer, cancel, outcome):
    env_label = "env.py"
    deadline = time.monotonic() + limits.episode_timeout_s
    try:
        try:
            env_limits = limits.for_browser() if manifest.get("kind") == "browser" else limits
            env.start(rollout.run.environment_version.files, mode="env", entrypoint=manifest["entrypoint"], limits=env_limits)
            env_label = env.label
            observation = env.reset(task, rollout.seed)
        except SandboxError as exc:
            raise _fault(env_label, exc) from None
        Rollout.objects.filter(pk=rollout.pk).update(initial_observation=observation)
        try:
            policy.start(env=env, task=agent_view_of(task, manifest.get("hidden_task_fields")), seed=rollout.seed, limits=limits)
        except SandboxError as exc:
            raise _fault("agent.py", exc) from None
        info: dict = {}
        end_reason = "max_steps"
        for index in range(max_steps):
            if writer.due():
                writer.flush()
            if cancel.cancelled():
                raise EpisodeCancelled()
            if time.monotonic() > deadline:
                raise EpisodeFault(
                    RolloutStatus.TIMED_OUT,
                    f"episode did not finish within episode_timeout_s={limits.episode_timeout_s:g} s",
                    "timeout",
                )
            try:
                action = policy.act(observation, info)
            except SandboxError as exc:
                raise _fault("agent.py", exc) from None
            except AgentFailed as exc:
                raise EpisodeFault(RolloutStatus.ERRORED, str(exc), "error") from None
            except AgentStepError as exc:
                # A malformed action is a step of its own: recorded, the env never sees it.
                info = _with_agent_record({"agent_error": exc.reason}, policy)
                writer.add({"index": index, "action": exc.action, "observation": observation, "reward": 0.0,
                            "terminated": False, "truncated": False, "info": info, "elapsed_ms": 0.0})
                continue
            except AgentDone as exc:
                end_reason = exc.end_reason
                break
            started = time.perf_counter()
            try:
                observation, reward, terminated, truncated, info = env.step(action)
            except SandboxError as exc:
                raise _fault(env_label, exc) from None
            writer.add(
                {
                    "index": index,
                    "action": action,
                    "observation": observation,
                    "reward": reward if reward is not None else 0.0,
                    "terminated": terminated,
                    "truncated": truncated,
                    "info": _with_agent_record(info if info is not None else {}, policy),
                    "elapsed_ms": (time.perf_counter() - started) * 1000.0,
                    **({ARTIFACT_KEY: env.last_artifact} if getattr(env, "last_artifact", None) else {}),
                }
            )
            if terminated or truncated:
                end_reason = "terminated" if terminated else "truncated"
                break
        writer.flush()
        if cancel.cancelled(force=True):
            raise EpisodeCancelled()
        outcome.end_reason = end_reason
        _verify(env, env_label, verify_timeout_s, writer, outcome)
    except EpisodeCancelled:
        outcome.status, outcome.end_reason = RolloutStatus.CANCELLED, "cancelled"
        outcome.error = "cancelled while running"
    except EpisodeFault as fault:
        outcome.status, outcome.end_reason, outcome.error = fault.status, fault.end_reason, fault.reason
    finally:
        # Steps taken before a fault are kept; a lost ownership must not write (flush raises it again).
        if writer.pending:
            writer.flush()
        outcome.step_count, outcome.total_reward = writer.step_count, writer.total_reward


def _with_agent_record(info, policy):
    """The env's info plus what the agent recorded for this action (a model agent: its request, reply,
    usage and latency) under "agent"."""
    record = getattr(policy, "step_record", None)
    if not record:
        return info
    return {**info, "agent": record} if isinstance(info, dict) else {"env_info": info, "agent": record}


def _verify(env, env_label, verify_timeout_s, writer, outcome):
    # The verifier has its own budget: the episode clock must not cut it short.
    env._episode_deadline = None
    try:
        reward, reason = env.verify(timeout=verify_timeout_s)
    except SandboxError as exc:
        if isinstance(exc, SandboxTimeout):
            text = f"{env_label} verify() did not answer within verify_timeout_s={verify_timeout_s:g} s"
        else:
            text = describe_fault(env_label, exc)
        outcome.verifier_error = text
        outcome.status = RolloutStatus.ERRORED
        outcome.error = f"verifier failed: {text}"
        return
    if reward is None:
        outcome.verifier_reason = reason
        outcome.status = RolloutStatus.SUCCEEDED if writer.total_reward > 0 else RolloutStatus.FAILED
        outcome.proposed_value = writer.total_reward
        outcome.proposed_rationale = f"{reason}: proposed from the episode's total reward"
        return
    outcome.verifier_reward, outcome.verifier_reason = reward, reason
    outcome.status = RolloutStatus.SUCCEEDED if reward > 0 else RolloutStatus.FAILED
    outcome.proposed_value = reward
    outcome.proposed_rationale = reason


def _public_facts(facts: dict) -> dict:
    """Sandbox facts that describe the episode's conditions (not this host's pids and uids)."""
    keep = ("backend", "python", "numpy", "gymnasium", "network_isolated", "limits", "pooled", "mode", "entrypoint", "notes")
    return {key: facts[key] for key in keep if key in facts}
