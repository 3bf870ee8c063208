"""Play mode pages: choose a version and task, then act as the agent (see runs/play.py)."""
import json

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from environments.selectors import version_tasks_head, versions_for_team
from studio.access import team_view
from studio.errors import DomainError
from studio.middleware import checks_its_own_form_fields

from . import play as play_service
from .action_names import named_space, play_controls
from .forms import PlayForm

ACTION_KINDS = ("click", "fill", "select", "press", "goto", "scroll", "wait", "done")


# The task chooser lists this many tasks; a version with more takes a typed task id (suggesting these).
TASKS_LISTED = 500


def _playable_versions(team):
    return versions_for_team(team=team)


def _chooser(request, *, versions, label: str, form: PlayForm, status: int = 200):
    version = next((v for v in versions if v.label == label), None)
    task_count, tasks = version_tasks_head(version, TASKS_LISTED) if version is not None else (0, [])
    return render(request, "runs/play.html", {
        "versions": versions, "version": version, "label": label, "play": None, "form": form,
        "tasks": tasks, "task_count": task_count, "tasks_listed": TASKS_LISTED,
    }, status=status)


@team_view("run")
def play_new(request):
    return _chooser(request, versions=_playable_versions(request.team), label=request.GET.get("version") or "",
                    form=PlayForm())


@team_view("run")
@require_POST
@checks_its_own_form_fields
def play_start(request):
    label = request.POST.get("version") or ""
    versions = _playable_versions(request.team)
    version = next((v for v in versions if v.label == label), None)
    if version is None:
        messages.error(request, "Choose an environment version to play.")
        return redirect(reverse("play:new", kwargs={"team": request.team.slug}))
    form = PlayForm(request.POST)
    if form.is_valid():
        try:
            play = play_service.play_start(team=request.team, actor=request.user, version=version,
                                           task_id=form.cleaned_data["task_id"], seed=form.cleaned_data["seed"])
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            return redirect(reverse("play:play", kwargs={"team": request.team.slug, "play_id": play.id}))
    # What was typed stays, with the error beside its field.
    return _chooser(request, versions=versions, label=label, form=form)


@team_view("run")
def play_page(request, play_id):
    try:
        play = play_service.play_get(team=request.team, play_id=play_id)
    except DomainError as exc:
        messages.error(request, str(exc))
        return redirect(reverse("play:new", kwargs={"team": request.team.slug}))
    manifest = play.rollout.run.environment_version.manifest
    controls = play_controls(manifest=manifest, action_space=play.action_space)
    # The space as the buttons call its actions (the version's [actions] names over the space's own).
    space = named_space(manifest=manifest, action_space=play.action_space)
    return render(request, "runs/play.html", {
        "play": play, "action_kinds": ACTION_KINDS, "rollout": play.rollout, "controls": controls,
        "action_space_json": json.dumps(space) if space else "",
    })


@team_view("run")
@require_POST
def play_act(request, play_id):
    try:
        action = json.loads(request.body or b"{}")
    except ValueError:
        return JsonResponse({"error": "the body must be a JSON action"}, status=400)
    try:
        step = play_service.play_act(team=request.team, play_id=play_id, action=action)
    except DomainError as exc:
        return JsonResponse({"error": str(exc)}, status=getattr(exc, "status", 400))
    return JsonResponse({
        "index": step["index"], "observation": step["observation"], "info": step["info"],
        "reward": step["reward"], "terminated": step["terminated"], "truncated": step["truncated"],
        "artifact_url": step.get("artifact_url"), "done": step["done"],
    })


@team_view("run")
@require_POST
def play_finish(request, play_id):
    try:
        rollout = play_service.play_finish(team=request.team, play_id=play_id)
    except DomainError as exc:
        messages.error(request, str(exc))
        return redirect(reverse("play:new", kwargs={"team": request.team.slug}))
    messages.info(request, f"Play finished: {rollout.status} (verifier: {rollout.verifier_reason or rollout.error})")
    return redirect(reverse("runs:rollout", kwargs={"team": request.team.slug, "rollout_id": rollout.pk}))
