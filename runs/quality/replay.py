"""Replay a stored rollout's actions on a version without running its agent: the new verifier's
judgement (verifier regression, re-verification), and whether the episode repeated; and play
actions the studio chose itself (the answer probes of answers.py) on a fresh episode.

One sandbox serves a batch of replays (each one a fresh reset with its own task and seed, as the
environment contract promises) up to REPLAYS_PER_SANDBOX, since the sandbox's CPU limit counts
its whole life; a sandbox fault restarts it for the next replay.
"""
import dataclasses
import logging

from django.conf import settings

from environments.dependencies.services import DependenciesNotReady

from ..artifacts import arrays_fingerprint
from ..episodes.setup import effective_limits, task_of, version_sandbox_config
from ..models import Rollout, Step
from ..sandbox import SandboxError, SandboxLimits
from ..sandbox.backends import sandbox_for

logger = logging.getLogger(__name__)

REPLAYS_PER_SANDBOX = 100


def version_sandbox(version, *, hash_seed: int | None = None, timezone: str | None = None):
    """An unstarted python sandbox that imports what `version`'s episodes import (its dependency
    environment, when it declares one). Raises DependenciesNotReady when that is not built.
    `hash_seed`, `timezone`: other host conventions than the studio's (SandboxConfig.conventions), the
    portability check's; isolation is the same."""
    config = version_sandbox_config(version)
    if hash_seed is not None:
        config = dataclasses.replace(config, hash_seed=hash_seed)
    if timezone is not None:
        config = dataclasses.replace(config, timezone=timezone)
    return sandbox_for(settings.SANDBOX_BACKEND, config)


@dataclasses.dataclass
class Replayed:
    rollout_id: int | None
    reward: float | None = None
    reason: str = ""
    # The first step whose observation differs from the stored one (same version only), else None.
    diverged_at: int | None = None
    # How it diverged ("the reset observation differs", "step 3's observation differs").
    divergence: str = ""
    error: str = ""
    # Every reward verify() gave when the final state was verified more than once (replay(verifies=K)).
    verdicts: list = dataclasses.field(default_factory=list)


class Replayer:
    """replay(rollout) on `version`, reusing one python sandbox; use as a context manager.
    `hash_seed`, `timezone`: host conventions other than the studio's, for every sandbox it starts."""

    def __init__(self, version, *, hash_seed: int | None = None, timezone: str | None = None):
        self.version = version
        self.hash_seed, self.timezone = hash_seed, timezone
        limits = effective_limits(version, None)
        self.limits = SandboxLimits.from_dict(limits)
        self.verify_timeout_s = float(limits.get("verify_timeout_s") or 30.0)
        self.sandbox = None
        self.served = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def _started(self):
        if self.sandbox is not None and self.served >= REPLAYS_PER_SANDBOX:
            self.close()
        if self.sandbox is None:
            self.served = 0
            try:
                self.sandbox = version_sandbox(self.version, hash_seed=self.hash_seed, timezone=self.timezone)
            except DependenciesNotReady as exc:
                raise SandboxError(exc.message) from None
            self.sandbox.start(self.version.files, mode="env", entrypoint=self.version.manifest["entrypoint"], limits=self.limits)
        return self.sandbox

    def replay(self, rollout: Rollout, *, steps=None, verifies: int = 1) -> Replayed:
        """`steps`: (index, action, observation, info) tuples in order (read when not given).
        `verifies`: how many times verify() judges the final state (every reward in `verdicts`; the
        first is `reward`)."""
        outcome = Replayed(rollout_id=rollout.pk)
        if (self.version.manifest.get("kind") or "python") != "python":
            outcome.error = "only python environments can be replayed"
            return outcome
        task = task_of(self.version, rollout.task_id)
        if task is None:
            outcome.error = f"task {rollout.task_id!r} is not in {self.version.label}"
            return outcome
        if steps is None:
            steps = Step.objects.filter(rollout=rollout).order_by("index").values_list("index", "action", "observation", "info")
        same_version = rollout.run.environment_version_id == self.version.pk
        try:
            sandbox = self._started()
            self.served += 1
            observation = sandbox.reset(task, rollout.seed)
            if same_version and arrays_fingerprint(observation) != arrays_fingerprint(rollout.initial_observation):
                outcome.diverged_at, outcome.divergence = 0, "the reset observation differs"
            for index, action, stored_observation, info in steps:
                if isinstance(info, dict) and "agent_error" in info:
                    continue  # the environment never saw this action
                observation, *_ = sandbox.step(action)
                if same_version and outcome.diverged_at is None and arrays_fingerprint(observation) != arrays_fingerprint(stored_observation):
                    outcome.diverged_at, outcome.divergence = index, f"step {index}'s observation differs"
            outcome.reward, outcome.reason = sandbox.verify(timeout=self.verify_timeout_s)
            outcome.verdicts.append(outcome.reward)
            for _again in range(verifies - 1):
                outcome.verdicts.append(sandbox.verify(timeout=self.verify_timeout_s)[0])
        except SandboxError as exc:
            outcome.error = str(exc)[:500]
            self.close()
        except DependenciesNotReady as exc:
            outcome.error = exc.message[:500]
        return outcome

    def play(self, *, task_id, seed, actions) -> Replayed:
        """A fresh episode of (task, seed) driven by `actions(observation, action_space, tools)`, a list
        of actions played in order until the episode ends, then verified (no stored rollout behind it)."""
        outcome = Replayed(rollout_id=None)
        if (self.version.manifest.get("kind") or "python") != "python":
            outcome.error = "only python environments can be replayed"
            return outcome
        task = task_of(self.version, task_id)
        if task is None:
            outcome.error = f"task {task_id!r} is not in {self.version.label}"
            return outcome
        try:
            sandbox = self._started()
            self.served += 1
            observation = sandbox.reset(task, seed)
            for action in actions(observation, sandbox.action_space, sandbox.tools or []):
                _observation, _reward, terminated, truncated, _info = sandbox.step(action)
                if terminated or truncated:
                    break
            outcome.reward, outcome.reason = sandbox.verify(timeout=self.verify_timeout_s)
        except SandboxError as exc:
            outcome.error = str(exc)[:500]
            self.close()
        except DependenciesNotReady as exc:
            outcome.error = exc.message[:500]
        return outcome
