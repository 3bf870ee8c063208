"""What an episode is before it starts: its task, the agent's view of it, effective limits, the
sandbox kind and the facts needed to reproduce it. One definition for every driver."""
import dataclasses

from environments.dependencies.services import DependenciesNotReady, version_python_path
from environments.package import DEFAULT_MAX_STEPS, concurrent_sessions_of

from ..models import Rollout
from ..sandbox import DEFAULT_CONFIG, SandboxConfig, SandboxLimits

# Run limits a run may set on top of the version's [limits] table.
RUN_LIMIT_KEYS = ("step_timeout_s", "episode_timeout_s", "verify_timeout_s", "memory_mb", "max_steps")
DEFAULT_VERIFY_TIMEOUT_S = 30.0


class TaskMissing(Exception):
    pass


def effective_limits(version, run_limits: dict | None) -> dict:
    """The version's [limits] with the run's overrides on top, plus max_steps."""
    limits = dict(version.manifest.get("limits") or {})
    limits["max_steps"] = version.manifest.get("max_steps", DEFAULT_MAX_STEPS)
    for key, value in (run_limits or {}).items():
        if key in RUN_LIMIT_KEYS and value is not None:
            limits[key] = value
    return limits


def agent_view_of(task: dict, hidden_fields) -> dict:
    """The task as the agent may see it: the version's hidden fields (e.g. the answer) removed."""
    hidden = set(hidden_fields or ())
    return {key: value for key, value in task.items() if key not in hidden}


def task_of(version, task_id) -> dict | None:
    """The version's task with this id; looked up inside the database when the version was read without
    its tasks (they can be megabytes)."""
    if "tasks" in version.get_deferred_fields():
        from environments.selectors import version_task

        return version_task(version, task_id)
    return next((t for t in version.tasks if str(t.get("id")) == str(task_id)), None)


def version_sandbox_config(version, base: SandboxConfig = DEFAULT_CONFIG) -> SandboxConfig:
    """`base` with the version's import path (its dependency environment), for sandboxes outside an
    episode (audits, replays); raises DependenciesNotReady when the version cannot run."""
    python_path = version_python_path(version)
    return base if python_path is None else dataclasses.replace(base, python_path=python_path)


@dataclasses.dataclass
class EpisodeSetup:
    rollout: Rollout
    version: object
    task: dict | None
    agent_task: dict
    seed: int
    limits: dict
    sandbox_limits: SandboxLimits
    max_steps: int
    verify_timeout_s: float
    kind: str  # the environment's kind: "python" or "browser" (the sandbox follows it)
    concurrent_sessions: int
    reproduction: dict
    # The sandbox's import path: the SDK then the version's dependency environment (None: the
    # studio's default path); `refusal` says why the episode cannot start when the set is not built.
    python_path: tuple[str, ...] | None = None
    refusal: str = ""

    @property
    def entrypoint(self) -> str:
        return self.version.manifest["entrypoint"]

    def sandbox_config(self, base: SandboxConfig) -> SandboxConfig:
        """`base` with this version's import path (sandbox pools are keyed by config)."""
        return base if self.python_path is None else dataclasses.replace(base, python_path=self.python_path)


def episode_setup(*, rollout: Rollout, driver: str) -> EpisodeSetup:
    """Everything an episode of `rollout` needs before its sandbox starts. `driver` names who drives it
    ("worker", "session", "play"); its task may be missing (then `task` is None and starting fails)."""
    run = rollout.run
    version = run.environment_version
    agent = run.agent
    manifest = version.manifest
    limits = effective_limits(version, run.limits)
    task = task_of(version, rollout.task_id)
    reproduction = {
        "environment": version.environment.slug,
        "version": version.label,
        "content_hash": version.content_hash,
        "task_id": rollout.task_id,
        "seed": rollout.seed,
        "repeat": rollout.repeat,
        "agent": {"name": agent.name, "kind": agent.kind, "code_hash": agent.code_hash, "config": agent.config},
        "limits": limits,
        "entrypoint": manifest.get("entrypoint"),
        "driver": driver,
    }
    if driver in ("session", "play"):
        reproduction[driver] = True
    if version.dependency_environment_id is not None:
        reproduction["dependencies"] = version.dependency_environment.sha256
    try:
        python_path, refusal = version_python_path(version), ""
    except DependenciesNotReady as exc:
        python_path, refusal = None, exc.message
    return EpisodeSetup(
        rollout=rollout,
        version=version,
        task=task,
        agent_task=agent_view_of(task or {}, manifest.get("hidden_task_fields")),
        seed=rollout.seed,
        limits=limits,
        sandbox_limits=SandboxLimits.from_dict(limits),
        max_steps=int(limits["max_steps"]),
        verify_timeout_s=float(limits.get("verify_timeout_s") or DEFAULT_VERIFY_TIMEOUT_S),
        kind=manifest.get("kind") or "python",
        concurrent_sessions=concurrent_sessions_of(manifest),
        reproduction=reproduction,
        python_path=python_path,
        refusal=refusal,
    )
