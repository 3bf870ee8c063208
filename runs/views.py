"""Pages for agents, runs and rollouts."""
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponse, JsonResponse
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from environments.selectors import environments_for_team, versions_for_team, version_tasks_head
from studio.access import InvalidToken, reader_for, team_view

from .review import selectors as review_selectors
from .quality.transcripts import run_suspicious
from studio.errors import DomainError
from studio.middleware import checks_its_own_form_fields

from .action_names import rollout_action_names

from . import artifacts, events, figures, selectors, services
from .episodes import interactive
from .forms import AgentForm, RunForm
from .models import RolloutStatus, RunPurpose, RunStatus

STEPS_PER_PAGE = 50
# The run page's rollouts table: one page of rows (previous / next to the others), so the page costs
# the same at 20 rollouts as at 100,000 (docs/performance.md).
ROLLOUTS_PER_PAGE = 50
# Past this many tasks the table's task filter is a text field, not a list of every task.
TASKS_LISTED = 100


class CountedPaginator(Paginator):
    """A paginator told its count (from figures the page already has) instead of counting the rows."""

    def __init__(self, object_list, per_page, *, count: int | None):
        super().__init__(object_list, per_page)
        if count is not None:
            self.__dict__["count"] = count  # Paginator.count is a cached_property


@team_view("read")
def run_list(request):
    """The team's runs, evaluations by default; filters by purpose, agent, version, status, date, and a search.
    A bad filter is shown beside the form (400), with no runs."""
    chosen = {key: request.GET.get(key, "").strip() for key in selectors.RUN_FILTER_KEYS}
    context = {"chosen": chosen, "purposes": RunPurpose.choices, "statuses": RunStatus.choices,
               "agents": selectors.agents_for_team(team=request.team),
               "environments": environments_for_team(team=request.team)}
    try:
        filters = selectors.run_filters_parse(team=request.team, params=request.GET)
    except selectors.InvalidRunFilter as exc:
        context.update(error=exc.message, error_field=exc.field, runs=[], counts=None, live=False)
        template = "runs/list.html#run-rows" if request.htmx else "runs/list.html"
        return render(request, template, context, status=400)
    counts = selectors.run_purpose_counts(team=request.team, filters=filters)
    runs = CountedPaginator(selectors.runs_with_counts(team=request.team, filters=filters), 50,
                            count=counts[filters.purpose or selectors.ALL_PURPOSES]).get_page(request.GET.get("page"))
    context.update(
        runs=runs, counts=counts, purpose_counts=[(value, name, counts[value]) for value, name in RunPurpose.choices],
        live=any(r.status in (RunStatus.QUEUED, RunStatus.RUNNING) for r in runs),
        filter_query=urlencode({key: value for key, value in chosen.items() if value}),
    )
    template = "runs/list.html#run-rows" if request.htmx else "runs/list.html"
    return render(request, template, context)


@team_view("run")
@checks_its_own_form_fields
def run_new(request):
    label = request.GET.get("version") or request.POST.get("version") or ""
    versions = versions_for_team(team=request.team)
    version = None
    if "@" in label:
        slug, _, number = label.partition("@")
        version = versions.filter(environment__slug=slug, number=int(number) if number.isdigit() else -1).first()
    agents = selectors.agents_to_run(team=request.team)
    form = RunForm(request.POST or None, agents=agents, version=version)
    if request.method == "POST" and version is None:
        messages.error(request, "Choose an environment version to run.")
    elif request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        limits = {k: data[k] for k in ("max_steps", "episode_timeout_s") if data.get(k)}
        try:
            agent = services.agent_for_run(team=request.team, actor=request.user, version=version, reference=data["agent"])
            run = services.run_create(
                team=request.team, actor=request.user, version=version, agent=agent, task_ids=data["tasks"],
                difficulties=data["difficulties"], seeds=data["seeds"], repeats=data["repeats"], limits=limits,
                reviews_required=data["reviews_required"], count=data.get("count"),
            )
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Run {run.pk} queued: {run.rollouts.count()} rollouts.", extra_tags="run-queued")
            return redirect("runs:run", team=request.team.slug, run_id=run.pk)
    task_count, tasks = version_tasks_head(version, 12) if version is not None else (0, [])
    return render(request, "runs/new.html", {"form": form, "version": version, "versions": versions, "label": label,
                                             "task_count": task_count, "tasks_head": tasks})


@team_view("read")
def run_detail(request, run_id):
    run = selectors.run_get(team=request.team, run_id=run_id)
    summary = figures.run_figures(run)
    table = {key: request.GET.get(key, "") for key in ("status", "task", "order")}
    rollouts = CountedPaginator(
        figures.run_rollouts(run, status=table["status"], task_id=table["task"], order=table["order"] or "id"), ROLLOUTS_PER_PAGE,
        count=figures.run_rollouts_count(summary, status=table["status"], task_id=table["task"]),
    ).get_page(request.GET.get("page"))
    analytics = figures.run_analytics(summary, figures.return_histogram(run))
    context = {
        "run": run, "summary": summary, "rollouts": rollouts, "points": figures.points_packed(figures.run_points(run, returned=summary["return"]["count"])), "points_shown": figures.POINTS_SHOWN, "analytics": analytics,
        "table": table, "tasks_listed": len(summary["by_task"]) <= TASKS_LISTED, "statuses": RolloutStatus.values, "orders": list(figures.ROLLOUT_ORDERS),
        "table_query": urlencode({key: value for key, value in table.items() if value}),
        "agreement": review_selectors.agreement(run=run, viewer=request.user),
        "export_url": reverse("review:export_run", kwargs={"team": request.team.slug, "run_id": run.pk}),
        # A cancelled run stays live while its running rollouts stop; Cancel shows only while it can act.
        "live": run.status in (RunStatus.QUEUED, RunStatus.RUNNING) or summary["pending"] > 0,
        "cancellable": run.status in (RunStatus.QUEUED, RunStatus.RUNNING),
        "running_now": selectors.running_now(run=run),
        "suspicious": run_suspicious(run=run),
    }
    if request.htmx and request.GET.get("partial") == "body":
        return render(request, "runs/run.html#run-body", context)
    return render(request, "runs/run.html", context)


@team_view("read")
def run_compare(request):
    """Two or more runs side by side, task by task: success rate and mean return, with deltas from the first."""
    text = request.GET.get("runs", "") or ",".join(request.GET.getlist("run"))
    try:
        runs = selectors.runs_by_ids(team=request.team, text=text)
    except ValueError as exc:
        return render(request, "runs/compare.html", {"error": str(exc), "text": text}, status=400 if text else 200)
    comparison = figures.runs_compared(runs)
    return render(request, "runs/compare.html", {
        "runs": runs, "comparison": comparison, "text": text,
        "chart": {"runs": [f"#{run.pk} {run.agent.name}" for run in runs], "tasks": [row["task_id"] for row in comparison["tasks"]],
                  "success": [[None if cell is None or cell["success_rate"] is None else round(100 * cell["success_rate"]) for cell in row["cells"]] for row in comparison["tasks"]]},
    })


@require_POST
@team_view("run")
def run_cancel(request, run_id):
    run = selectors.run_get(team=request.team, run_id=run_id)
    services.run_cancel(run=run, actor=request.user)
    messages.success(request, f"Run {run.pk} cancelled: queued rollouts will not start, running ones stop.")
    return redirect("runs:run", team=request.team.slug, run_id=run.pk)


@team_view("read")
def rollout_detail(request, rollout_id):
    rollout = selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    steps = Paginator(rollout.steps.order_by("index"), STEPS_PER_PAGE).get_page(request.GET.get("page"))
    comparison = None
    if rollout.rerun_of_id and rollout.is_finished and rollout.rerun_of.is_finished:
        comparison = selectors.compare_trajectories(rollout.rerun_of, rollout)
    context = {
        "rollout": rollout, "steps": steps, "labels": review_selectors.visible_labels(rollout, request.user),
        "comparison": comparison, "reruns": rollout.reruns.order_by("-id")[:10],
        "live": not rollout.is_finished, "action_names": rollout_action_names(rollout),
    }
    if request.htmx and request.GET.get("partial") == "steps":
        return render(request, "runs/rollout.html#steps", context)
    return render(request, "runs/rollout.html", context)


@team_view("read")
def rollout_steps_json(request, rollout_id):
    """A window of steps for the replay viewer: ?offset=N&limit=M (at most 500)."""
    rollout = selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    try:
        offset = max(0, int(request.GET.get("offset", 0)))
        limit = min(500, max(1, int(request.GET.get("limit", 200))))
    except ValueError:
        return JsonResponse({"detail": "offset and limit must be whole numbers", "field": "offset"}, status=400)
    rows = rollout.steps.filter(index__gte=offset, index__lt=offset + limit).order_by("index").values(*events.STEP_FIELDS, "artifact")
    return JsonResponse({"offset": offset, "limit": limit, "steps": [events.step_json(r, rollout_id=rollout.pk) for r in rows]})


@team_view("read")
def rollout_timeline_json(request, rollout_id):
    """Everything the viewer's timeline needs up front: per-step rewards and flags, the rollout's state."""
    rollout = selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    rows = list(rollout.steps.order_by("index").values_list("index", "reward", "terminated", "truncated"))
    return JsonResponse({
        "rollout": rollout_state(rollout),
        "indexes": [r[0] for r in rows],
        "rewards": [r[1] for r in rows],
        "ends": [i for i, _, term, trunc in rows if term or trunc],
    })


def rollout_state(rollout) -> dict:
    """The live status fields, plus what only the viewer's first load needs."""
    return {
        **events.rollout_status(rollout), "id": rollout.pk, "verifier_error": rollout.verifier_error,
        "finished": rollout.is_finished,
        "initial_observation": artifacts.arrays_public(rollout.initial_observation, rollout_id=rollout.pk),
        "reset_info": rollout.reset_info,
    }


@require_POST
@team_view("run")
def rollout_rerun(request, rollout_id):
    rollout = selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    try:
        new = services.rollout_rerun(rollout=rollout, actor=request.user)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("runs:rollout", team=request.team.slug, rollout_id=rollout.pk)
    messages.success(request, f"Rerunning as rollout {new.pk}; this page compares the two when it finishes.")
    return redirect("runs:rollout", team=request.team.slug, rollout_id=new.pk)


@team_view("read")
def episodes_open(request):
    """The team's open interactive episodes and the memory they hold against its budget."""
    summary = interactive.open_episodes_of(team=request.team)
    template = "runs/episodes.html#episode-rows" if request.htmx else "runs/episodes.html"
    return render(request, template, {"summary": summary})


@team_view("read")
def agent_list(request):
    agents = selectors.agents_with_run_counts(team=request.team)
    form = AgentForm()
    return render(request, "runs/agents.html", {"agents": agents, "form": form})


@team_view("run")
def agent_new(request):
    form = AgentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            agent = services.agent_create(team=request.team, actor=request.user, **form.service_kwargs())
        except DomainError as exc:
            field = (exc.field or "").removeprefix("config.")
            form.add_error(field if field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Agent {agent.name} created.")
            return redirect("runs:agent", team=request.team.slug, agent_id=agent.pk)
    return render(request, "runs/agent_new.html", {"form": form})


@team_view("read")
def agent_detail(request, agent_id):
    agent = selectors.agent_get(team=request.team, agent_id=agent_id)
    runs = selectors.runs_with_counts(team=request.team, filters=selectors.RunFilters(purpose=None, agent_id=agent.pk))[:20]
    key_set = selectors.agent_has_api_key(agent=agent)
    return render(request, "runs/agent.html", {"agent": agent, "runs": runs, "api_key_set": key_set})


@require_safe
def artifact_serve(request, rollout_id, filename):
    """A step artifact (a screenshot), read from the artifact storage and sent only to members of the
    rollout's team: the session user, or a bearer token of that team. Anonymous pages go to the login
    page; another team's artifact, or a missing one, is a 404."""
    try:
        user, team = reader_for(request)
    except InvalidToken:
        return JsonResponse({"detail": "Missing or invalid token. Send `Authorization: Bearer <token>`."}, status=401)
    if user is None:
        return redirect_to_login(request.get_full_path())
    selectors.rollout_get_for_reader(user=user, team=team, rollout_id=rollout_id)
    try:
        data, content_type = artifacts.artifact_read(rollout_id=rollout_id, filename=filename)
    except artifacts.ArtifactNotFound:
        raise Http404("No such artifact") from None
    response = HttpResponse(data, content_type=content_type)
    # A stored name is never written twice (see artifact_storage in settings), but only members may keep a copy.
    response["Cache-Control"] = "private, max-age=86400"
    return response
