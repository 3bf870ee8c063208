"""State changes of agents and runs as people ask for them: create an agent or a run, cancel it, rerun
a rollout. Pages, the API and the CLI call these; permission checks happen at the edge. What a worker
does with a rollout (claim, execute, recover, requeue, finish) is runs/episodes/worker.py and status.py.
"""
import logging
import math

from django.db import IntegrityError, transaction
from django.utils import timezone

from environments.package import LIMIT_MAXIMA, MEMORY_MB_RANGE
from environments.dependencies.services import ensure_version_runnable
from studio.errors import DomainError
from studio.storage_quota import storage_quota_check

from . import events
from .agents import VERSION_AGENT, code_hash, oracle_path, version_agent_file
from .curriculum.sampler import strategy_of, training_tasks
from .episodes.setup import RUN_LIMIT_KEYS
from .episodes.status import rollouts_send_on_commit, run_ended
from .quality.gate import ensure_version_servable
from .models import (
    Agent,
    AgentKind,
    Rollout,
    RolloutStatus,
    Run,
    RunPurpose,
    RunStatus,
)
from .selectors import agent_by_reference

logger = logging.getLogger(__name__)

MAX_ROLLOUTS_PER_RUN = 10_000
RUNNABLE_AGENT_KINDS = (AgentKind.RANDOM, AgentKind.SCRIPTED, AgentKind.OPENAI)


class InvalidRun(DomainError):
    pass


class InvalidAgent(DomainError):
    pass


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


def version_agent(*, version, actor) -> Agent:
    """The scripted agent `version` ships (its `[quality] oracle`, else agent.py: version_agent_file),
    as a team agent: the same code is the same agent (the audit's oracle included, same name), so its
    runs and statistics gather under one name. InvalidRun (field "agent") when the version ships none."""
    path = version_agent_file(version)
    if path is None:
        raise InvalidRun(
            f"{version.label} ships no agent: add agent.py (or name a file in [quality] oracle) to its package,"
            " or choose another agent.", field="agent")
    stem = "oracle" if path == oracle_path(version) else path.removesuffix(".py").replace("/", "-")
    try:
        return agent_get_or_create(team=version.environment.team, actor=actor, name=f"{version.environment.slug}-{stem}",
                                   kind=AgentKind.SCRIPTED, code=version.files[path])
    except InvalidAgent as exc:
        raise InvalidRun(f"{version.label}'s {path}: {exc.message}", field="agent") from None


def agent_for_run(*, team, actor, version, reference) -> Agent:
    """The agent a run names: "version" (the version's own agent, version_agent), an agent's id or
    name, or "random" (the built-in one, made on first use). InvalidRun (field "agent") otherwise."""
    if reference == VERSION_AGENT:
        return version_agent(version=version, actor=actor)
    agent = agent_by_reference(team=team, reference=reference)
    if agent is None and reference == "random":
        agent = agent_get_or_create(team=team, actor=actor, name="random", kind=AgentKind.RANDOM)
    if agent is None:
        raise InvalidRun(f"No agent {reference!r} in this team; use 'random', 'version' (this version's own agent),"
                         " an agent's name or an agent id.", field="agent")
    return agent


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
    limits: dict | None = None, reviews_required: int = 1, enqueue: bool = True, purpose: str = RunPurpose.EVALUATION,
    count: int | None = None,
) -> Run:
    """One rollout per (task, seed, repeat), each enqueued once the transaction commits
    (`enqueue=False`: the caller executes them itself, as `run_rollouts --inline` does). `purpose`: why
    the run exists (RunPurpose; an audit's runs say so, and stay out of lists and the review queue)."""
    if version.environment.team_id != team.pk:
        raise InvalidRun("That environment version belongs to another team.", field="version")
    if agent.team_id != team.pk:
        raise InvalidRun("That agent belongs to another team.", field="agent")
    if agent.kind not in RUNNABLE_AGENT_KINDS:
        raise InvalidRun(f"Agents of kind {agent.kind!r} cannot run rollouts yet.", field="agent")
    storage_quota_check(team_id=team.pk, what="New run")
    ensure_version_runnable(version)  # its dependency environment built and its entrypoint checked
    if purpose == RunPurpose.EVALUATION:
        ensure_version_servable(version=version)  # the team's training gate (audits look at flagged versions)
    # "curriculum[:STRATEGY]": `count` rollouts whose tasks the sampler picks as each is dispatched.
    curriculum = strategy_of(task_ids) or ""
    tasks = training_tasks(list(version.tasks)) if curriculum else _selected_tasks(version, task_ids, difficulties)
    if curriculum and not tasks:
        raise InvalidRun(f"{version.label} has no training tasks for a curriculum (every task is split = eval).", field="task_ids")
    seeds = _checked_seeds(list(seeds) if isinstance(seeds, (list, tuple, range)) else seeds)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InvalidRun("Repeats must be a whole number of at least 1.", field="repeats")
    if isinstance(reviews_required, bool) or not isinstance(reviews_required, int) or not 1 <= reviews_required <= 10:
        raise InvalidRun("Reviews required must be from 1 to 10.", field="reviews_required")
    if curriculum and (isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_ROLLOUTS_PER_RUN):
        raise InvalidRun(f"A curriculum run needs a count of rollouts from 1 to {MAX_ROLLOUTS_PER_RUN}.", field="count")
    total = count if curriculum else len(tasks) * len(seeds) * repeats
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
            purpose=purpose, curriculum=curriculum,
        )
        planned = (
            # Seeds in turn; the task stays "" until the worker picks it (runs.curriculum.services.task_pick).
            [Rollout(team=team, run=run, task_id="", seed=seeds[i % len(seeds)], repeat=i // len(seeds)) for i in range(total)]
            if curriculum else
            [Rollout(team=team, run=run, task_id=str(task["id"]), seed=seed, repeat=repeat)
             for task in tasks for seed in seeds for repeat in range(repeats)]
        )
        rollouts = Rollout.objects.bulk_create(planned, batch_size=2000)
        if enqueue:
            rollouts_send_on_commit([rollout.pk for rollout in rollouts])
    return run


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
        run_ended(run=run)
        cancelled = Rollout.objects.filter(run=run, status=RolloutStatus.CANCELLED, finished_at=now)
        for rollout in cancelled.iterator():
            events.publish_rollout(rollout)

    transaction.on_commit(announce)
    return run


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
        rollouts_send_on_commit([rerun.pk])
    return rerun
