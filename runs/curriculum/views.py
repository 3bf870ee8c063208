"""The version page's task map (an htmx part): pass rate per task for one agent, coloured by band, and
each agent's training tasks beside its held-out ones (the train-eval gap)."""
from django.shortcuts import render
from django.views.decorators.http import require_safe

from environments import selectors as env_selectors
from environments.package import task_split
from studio.access import team_view

from . import stats

BAND_LABELS = {"learnable": "learnable", "too_easy": "too easy", "too_hard": "too hard", "unknown": "unknown"}


@require_safe
@team_view("read")
def task_map(request, slug, number):
    env = env_selectors.environment_get(team=request.team, slug=slug)
    version = env_selectors.version_get(environment=env, number=number, content=True)
    agents = stats.agents_by_rollouts(version=version)
    chosen = request.GET.get("agent") or (agents[0] if agents else "")
    if chosen not in agents:
        chosen = agents[0] if agents else ""
    tasks = version.tasks or []
    figures = stats.task_figures(version=version, agent_name=chosen, tasks=tasks) if chosen else []
    rows = [{"f": f, "held_out": task_split(task) == "eval", "label": BAND_LABELS[f.band]} for f, task in zip(figures, tasks)]
    held_out = any(task_split(task) == "eval" for task in tasks)
    return render(request, "curriculum/_task_map.html", {
        "env": env, "version": version, "agents": agents, "agent": chosen, "rows": rows,
        "gaps": stats.split_gaps(version=version, tasks=tasks) if held_out and agents else [],
        "bands": {band: sum(1 for f in figures if f.band == band) for band in BAND_LABELS},
    })
