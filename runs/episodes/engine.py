"""The worker's driver of an episode: an agent policy acts until the episode ends.

The episode itself (sandbox by kind, steps, limits, verifier, final state) is the episode service's
(runs/episodes); this loop only asks the policy for actions, checks for cancellation and the episode
clock, and decides when to finish.
"""
import logging
import time

from ..agent_errors import AgentDone, AgentFailed, AgentStepError
from ..agents import policy_for
from . import (
    EpisodeFault,
    Heartbeat,
    episode_fail,
    episode_finish,
    episode_interrupt,
    episode_reject_action,
    episode_setup,
    episode_start,
    episode_step,
    fault_of,
    public_facts,
    rollout_end,
)
from ..models import Rollout, RolloutStatus, RunStatus
from ..sandbox import DEFAULT_CONFIG, SandboxError

logger = logging.getLogger(__name__)

CANCEL_CHECK_EVERY_S = 0.5


class CancelCheck:
    """Whether the rollout or its run was cancelled: what the writer's last flush read (every flush
    reads the run's status), or, when no flush reached the database for CANCEL_CHECK_EVERY_S, a query."""

    def __init__(self, rollout: Rollout, writer):
        self.rollout_id = rollout.pk
        self.writer = writer
        self.last = time.monotonic()

    def cancelled(self, force: bool = False) -> bool:
        now = time.monotonic()
        if now - self.writer.checked_at < CANCEL_CHECK_EVERY_S:
            return self.writer.run_cancelled
        if not force and now - self.last < CANCEL_CHECK_EVERY_S:
            return False
        self.last = now
        row = Rollout.objects.filter(pk=self.rollout_id).values_list("status", "run__status").first()
        return row is None or row[0] == RolloutStatus.CANCELLED or row[1] == RunStatus.CANCELLED


def _cancelled() -> EpisodeFault:
    return EpisodeFault(RolloutStatus.CANCELLED, "cancelled while running", "cancelled")


def run_episode(rollout: Rollout) -> str:
    """Play one episode of `rollout` (claimed and running) to its end and write its final state;
    returns the final status. Never raises for faults of user code or sandboxes; raises
    LostOwnership if another worker took the rollout over."""
    setup = episode_setup(rollout=rollout, driver="worker")
    try:
        with Heartbeat(rollout) as heartbeat:
            return _drive(setup, heartbeat)
    except EpisodeFault as fault:
        return fault.status


def _drive(setup, heartbeat: Heartbeat) -> str:
    rollout = setup.rollout
    try:
        policy = policy_for(rollout.run.agent, seed=setup.seed, manifest=setup.version.manifest,
                            sandbox_config=setup.sandbox_config(DEFAULT_CONFIG))
    except AgentFailed as exc:
        # No sandbox started yet: the rollout ends with the agent's reason, not as a worker bug.
        rollout_end(rollout=rollout, status=RolloutStatus.ERRORED, error=str(exc), end_reason="error")
        return RolloutStatus.ERRORED
    try:
        return _drive_with(setup, policy, heartbeat)
    finally:
        policy.close()


def _drive_with(setup, policy, heartbeat: Heartbeat) -> str:
    rollout = setup.rollout
    episode = episode_start(setup=setup)
    heartbeat.writer = episode.writer
    # A cancel seen while a call hangs (a step that sleeps) kills the sandboxes: the call returns at once.
    # The agent's sandbox is read then: None for a policy in the worker (a model's, a random agent's on a
    # bounded space), and a random agent may start one mid-episode.
    heartbeat.on_cancel = lambda: episode_interrupt(
        episode=episode, fault=_cancelled(), sandboxes=[policy.sandbox] if policy.sandbox is not None else [])
    try:
        policy.start(env=episode.sandbox, task=setup.agent_task, seed=setup.seed, limits=setup.sandbox_limits)
    except SandboxError as exc:
        raise episode_fail(episode=episode, fault=episode.interruption or fault_of("agent.py", exc)) from None
    except AgentFailed as exc:
        raise episode_fail(episode=episode, fault=EpisodeFault(RolloutStatus.ERRORED, str(exc), "error")) from None
    finally:
        _note_agent_sandbox(setup, policy)
    writer, cancel = episode.writer, CancelCheck(rollout, episode.writer)
    deadline = time.monotonic() + setup.sandbox_limits.episode_timeout_s
    end_reason = "max_steps"
    while not episode.done:
        if writer.due():
            writer.flush()
        if episode.interruption is not None or cancel.cancelled():
            raise episode_fail(episode=episode, fault=_cancelled())
        if time.monotonic() > deadline:
            raise episode_fail(episode=episode, fault=EpisodeFault(
                RolloutStatus.TIMED_OUT,
                f"episode did not finish within episode_timeout_s={setup.sandbox_limits.episode_timeout_s:g} s",
                "timeout",
            ))
        try:
            action = policy.act(episode.observation, episode.info)
        except SandboxError as exc:
            _note_agent_sandbox(setup, policy)
            raise episode_fail(episode=episode, fault=episode.interruption or fault_of("agent.py", exc)) from None
        except AgentFailed as exc:
            _note_agent_sandbox(setup, policy)
            raise episode_fail(episode=episode, fault=episode.interruption or EpisodeFault(RolloutStatus.ERRORED, str(exc), "error")) from None
        except AgentStepError as exc:
            episode_reject_action(episode=episode, action=exc.action, reason=exc.reason, agent_record=_record(policy))
            if writer.step_count >= setup.max_steps:
                break
            continue
        except AgentDone as exc:
            end_reason = exc.end_reason
            if exc.record:
                # The agent's last turn took no step (a model's answer in text): kept for the transcript.
                setup.reproduction["agent_last_turn"] = exc.record
            break
        episode_step(episode=episode, action=action, agent_record=_record(policy))
    _note_agent_sandbox(setup, policy)
    writer.flush()
    if episode.interruption is not None or cancel.cancelled(force=True):
        raise episode_fail(episode=episode, fault=_cancelled())
    return episode_finish(episode=episode, end_reason=end_reason).status


def _note_agent_sandbox(setup, policy) -> None:
    """Where the agent ran, in the reproduction record (a random agent may start its sandbox mid-episode)."""
    if policy.facts:
        setup.reproduction["agent_sandbox"] = public_facts(policy.facts)


def _record(policy) -> dict | None:
    """What the agent recorded for this action (a model agent: its request, reply, usage, latency)."""
    return policy.step_record or None
