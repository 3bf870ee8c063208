"""The curriculum's reads for the API and pages: statistics and samples, team-scoped by the version."""
from environments.package import task_split
from studio.errors import DomainError

from ..models import Agent, Rollout
from . import sampler, stats


class UnknownAgent(DomainError):
    field = "agent"


def _agent_known(*, team, version, agent_name: str) -> None:
    if not agent_name:
        names = stats.agents_with_stats(version=version)
        raise UnknownAgent("agent is required: the name of one of the team's agents"
                           + (f" (with statistics here: {', '.join(names[:20])})" if names else ""))
    if not Agent.objects.filter(team=team, name=agent_name).exists():
        raise UnknownAgent(f"the team has no agent named {agent_name!r}")


def stats_for(*, team, version, agent_name: str) -> dict:
    _agent_known(team=team, version=version, agent_name=agent_name)
    tasks = version.tasks or []
    figures = stats.task_figures(version=version, agent_name=agent_name, tasks=tasks)
    note = None if any(f.rollouts for f in figures) else f"no finished rollouts of {agent_name} on {version.label} yet"
    splits = stats.split_summary(tasks=tasks, counts={f.task_id: (f.rollouts, f.successes) for f in figures})
    return {"agent": agent_name, "version": version.label, "note": note, "splits": splits,
            "tasks": [{**f.as_json(), "split": task_split(task)} for f, task in zip(figures, tasks)]}


def _draw(*, version, agent_name: str, strategy: str, k: int, seed: int, cost_aware: bool = False,
          recent: bool = False) -> tuple[list[str], bool]:
    """k training tasks by `strategy` from the agent's statistics as they are now (uniform while it has
    none; an unknown strategy is refused by name whatever the statistics), and whether it had any."""
    figures = stats.task_figures(version=version, agent_name=agent_name, tasks=sampler.training_tasks(version.tasks or []))
    known = any(f.rollouts for f in figures)
    used = strategy if known or strategy not in sampler.STRATEGIES else "uniform"
    return sampler.sample(figures, k=k, strategy=used, seed=seed, cost_aware=cost_aware, recent=recent), known


def task_pick(rollout) -> str:
    """A curriculum run's rollout gets its task when it is dispatched: one draw by the run's strategy from
    the agent's statistics as they are now (seeded by the rollout, so a retried attempt draws alike)."""
    run = rollout.run
    task_id = task_for_episode(version=run.environment_version, agent_name=run.agent.name, strategy=run.curriculum,
                               seed=rollout.pk)
    Rollout.objects.filter(pk=rollout.pk, task_id="").update(task_id=task_id)
    rollout.task_id = Rollout.objects.values_list("task_id", flat=True).get(pk=rollout.pk)
    return rollout.task_id


def task_for_episode(*, version, agent_name: str, strategy: str, seed: int) -> str:
    """The task of a remote episode opened with `curriculum=STRATEGY` and no task: one draw for the agent
    from its statistics as they are now (uniform while it has none), seeded by the episode's seed."""
    if strategy not in sampler.STRATEGIES:
        raise sampler.InvalidSample(f"curriculum must be one of {', '.join(sampler.STRATEGIES)}, not {strategy!r}",
                                    field="curriculum")
    (task_id,), _ = _draw(version=version, agent_name=agent_name, strategy=strategy, k=1, seed=seed)
    return task_id


def sample_for(*, team, version, agent_name: str, k: int, strategy: str, seed: int, cost_aware: bool = False,
               recent: bool = False) -> dict:
    _agent_known(team=team, version=version, agent_name=agent_name)
    ids, known = _draw(version=version, agent_name=agent_name, strategy=strategy, k=k, seed=seed, cost_aware=cost_aware,
                       recent=recent)
    note = None if known else f"no statistics for {agent_name} on {version.label} yet: sampled uniformly"
    return {"agent": agent_name, "strategy": strategy, "tasks": ids, "note": note}
