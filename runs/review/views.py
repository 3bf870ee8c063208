"""Review pages: the queue with filters, the review screen (replay + decision panel), page exports."""
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from environments.selectors import environments_for_team
from studio.access import team_view
from studio.errors import DomainError
from studio.middleware import checks_its_own_form_fields

from .. import labels as layers
from .. import selectors as run_selectors
from ..models import RunPurpose
from . import selectors, services
from .export import ExportFilter, InvalidExport, export_count
from .export_chat import ARGUMENT_MODES
from .export_http import export_refusal, export_response
from .forms import DecisionForm

QUICK_TAGS = ["reward-hack", "env-bug", "ambiguous-task", "agent-error", "good-example"]
FILTER_KEYS = ("environment", "version", "run", "agent", "min_reward", "max_reward", "outcome", "disagreement", "purpose")


def _filters(params) -> tuple[selectors.QueueFilters, dict, list[str]]:
    """Queue filters from a query string; bad values are reported, not fatal."""
    raw = {k: params.get(k, "").strip() for k in FILTER_KEYS}
    errors = []

    def number(key, cast):
        if not raw[key]:
            return None
        try:
            return cast(raw[key])
        except ValueError:
            errors.append(f"{key} must be a number, got {raw[key]!r}")
            return None

    outcome = raw["outcome"] if raw["outcome"] in ("pass", "fail") else None
    purpose = raw["purpose"] or RunPurpose.EVALUATION
    if purpose != "all" and purpose not in RunPurpose.values:
        errors.append(f"purpose must be one of {', '.join(RunPurpose.values)} or all, got {raw['purpose']!r}")
        purpose = RunPurpose.EVALUATION
    filters = selectors.QueueFilters(
        environment=raw["environment"] or None, version=number("version", int), run_id=number("run", int),
        agent_id=number("agent", int), min_reward=number("min_reward", float), max_reward=number("max_reward", float),
        verifier_outcome=outcome, disagreement=raw["disagreement"] in ("1", "true", "on"),
        purpose=None if purpose == "all" else purpose,
    )
    return filters, {k: v for k, v in raw.items() if v}, errors


COUNT_CAP = 1000




def _capped(n: int) -> str:
    """How many items wait, counted up to a cap (an exact count of a 100k queue reads 100k index entries)."""
    return f"{COUNT_CAP}+" if n > COUNT_CAP else str(n)


def _capped_count(*, team, reviewer, filters) -> str:
    return _capped(selectors.review_queue_count(team=team, reviewer=reviewer, filters=filters, most=COUNT_CAP))


def _qs(active: dict) -> str:
    return ("?" + urlencode(active)) if active else ""


@team_view("read")
def queue(request):
    filters, active, errors = _filters(request.GET)
    items, n = selectors.review_queue_head(team=request.team, reviewer=request.user, filters=filters, limit=100,
                                           most=COUNT_CAP)
    total = _capped(n)
    return render(request, "review/queue.html", {
        "items": items, "total": total, "active": active, "errors": errors, "qs": _qs(active),
        "environments": environments_for_team(team=request.team),
        "agents": run_selectors.agents_for_team(team=request.team),
        "runs": run_selectors.recent_runs(team=request.team, most=50, purpose=filters.purpose),
        "purposes": RunPurpose.choices,
        "can_review": request.membership.can_review,
    })


@require_POST
@team_view("review")
def bulk_decide(request):
    """Approve or reject every rollout of the filtered queue (at most services.BULK_MOST), by the usual rules."""
    filters, active, errors = _filters(request.GET)
    back = reverse("review:queue", kwargs={"team": request.team.slug}) + _qs(active)
    if errors:
        messages.error(request, "; ".join(errors))
        return redirect(back)
    queue = selectors.review_queue(team=request.team, reviewer=request.user, filters=filters)
    try:
        result = services.labels_decide_bulk(
            team=request.team, rollouts=queue, actor=request.user, decision=request.POST.get("decision", ""),
            rationale=request.POST.get("rationale", ""),
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    verb = "Approved" if result["decision"] == "approved" else "Rejected"
    messages.success(request, f"{verb} {len(result['decided'])} rollout{'' if len(result['decided']) == 1 else 's'}.")
    if result["refused"]:
        shown = "; ".join(f"#{item['rollout_id']}: {item['reason']}" for item in result["refused"][:5])
        more = f" (and {len(result['refused']) - 5} more)" if len(result["refused"]) > 5 else ""
        messages.error(request, f"{len(result['refused'])} refused: {shown}{more}")
    return redirect(back)


@team_view("read")
def queue_next(request):
    """Go to the next item of the (filtered) queue after ?after=ID, or back to the queue when done."""
    filters, active, _ = _filters(request.GET)
    after = request.GET.get("after")
    item = selectors.next_in_queue(
        team=request.team, reviewer=request.user, filters=filters,
        after_rollout_id=int(after) if after and after.isdigit() else None,
    )
    if item is None:
        messages.success(request, "The queue is empty for these filters. Nice work.")
        return redirect(reverse("review:queue", kwargs={"team": request.team.slug}) + _qs(active))
    return redirect(reverse("review:item", kwargs={"team": request.team.slug, "rollout_id": item.pk}) + _qs(active))


@team_view("read")
def item(request, rollout_id):
    return _item_page(request, rollout_id)


def _item_page(request, rollout_id, *, form=None, status=200):
    rollout = run_selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    _, active, _ = _filters(request.GET)
    open_for_me = selectors.review_open_for(rollout, request.user)
    labels = selectors.visible_labels(rollout, request.user)
    rollout_level = [label for label in labels if label.step_id is None]
    own = rollout.run.environment_version_id
    form = form or DecisionForm()
    return render(request, "review/item.html", {
        "rollout": rollout, "labels": labels, "open_for_me": open_for_me,
        "proposal": layers.proposal_of(rollout_level, own_version_id=own),
        "current": layers.current_label_of(rollout_level, own_version_id=own),
        "disagreement": layers.in_disagreement(rollout_level, own_version_id=own),
        "can_review": request.membership.can_review, "can_annotate": request.membership.can_review or request.membership.can_author,
        "annotations": selectors.annotations_for(rollout=rollout), "quick_tags": QUICK_TAGS,
        "qs": _qs(active), "active": active, "form": form,
        # The override fields stay open when the refusal is about them, with what was typed in them.
        "override_open": form.is_bound and (form.data.get("decision") == "overridden" or "value" in form.errors
                                            or "rationale" in form.errors),
        "left": _capped_count(team=request.team, reviewer=request.user, filters=_filters(request.GET)[0]),
    }, status=status)


@require_POST
@team_view("review")
@checks_its_own_form_fields
def decide(request, rollout_id):
    rollout = run_selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    _, active, _ = _filters(request.GET)
    data = request.POST.copy()
    # The keyboard's choice (the hidden field, first) over a button's own value (the form without scripts).
    data["decision"] = next((d for d in request.POST.getlist("decision") if d), "")
    form = DecisionForm(data)
    if not form.is_valid():
        return _decision_refused(request, rollout, form)
    try:
        label = services.label_decide(
            rollout=rollout, actor=request.user, decision=form.cleaned_data["decision"], value=form.cleaned_data["value"],
            rationale=form.cleaned_data["rationale"],
        )
    except DomainError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return _decision_refused(request, rollout, form)
    messages.success(request, f"Rollout #{rollout.pk}: {label.decision}" + (f" ({label.value})" if label.value is not None else "") + ".")
    url = reverse("review:next", kwargs={"team": request.team.slug}) + "?" + urlencode({**active, "after": rollout.pk})
    if request.htmx:
        filters = _filters(request.GET)[0]
        following = selectors.next_in_queue(team=request.team, reviewer=request.user, after_rollout_id=rollout.pk, filters=filters)
        if following is None:
            response = HttpResponse(status=204)
            response["HX-Redirect"] = url
            return response
        # The next item in place of this one, without a page load: the page's <main> swapped, its URL pushed.
        response = _item_page(request, following.pk)
        response["HX-Retarget"], response["HX-Reswap"], response["HX-Reselect"] = "main", "outerHTML", "main"
        response["HX-Push-Url"] = reverse("review:item", kwargs={"team": request.team.slug, "rollout_id": following.pk}) + _qs(active)
        return response
    return redirect(url)


def _decision_refused(request, rollout, form):
    """The review screen again with the refusal beside its field and what was typed kept (400); an htmx
    post swaps only the decision panel, so the replay stays where the reviewer left it."""
    response = _item_page(request, rollout.pk, form=form, status=400)
    if request.htmx:
        response["HX-Retarget"], response["HX-Reswap"], response["HX-Reselect"] = "#decision", "outerHTML", "#decision"
    return response


@require_POST
@team_view("read")
def annotate(request, rollout_id):
    rollout = run_selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    step = None
    index = request.POST.get("step", "").strip()
    if index not in ("", "-1"):
        step = run_selectors.step_at(rollout=rollout, index=int(index) if index.isdigit() else -1)
    tags = request.POST.getlist("tags") + [t for t in request.POST.get("extra_tags", "").replace(",", " ").split() if t]
    error = None
    try:
        services.annotation_add(rollout=rollout, actor=request.user, text=request.POST.get("text", ""), tags=tags, step=step)
    except DomainError as exc:
        error = exc.message
    return render(request, "review/_annotations.html", {
        "rollout": rollout, "annotations": selectors.annotations_for(rollout=rollout), "error": error,
    }, status=400 if error else 200)


@team_view("read")
def export_run(request, run_id):
    run = run_selectors.run_get(team=request.team, run_id=run_id)
    return _export(request, run.rollouts.all(), f"run-{run.pk}")


@team_view("read")
def export_version(request, slug, number):
    rollouts = run_selectors.rollouts_of_version_number(team=request.team, slug=slug, number=number)
    return _export(request, rollouts, f"{slug}-v{number}")


def _export(request, rollouts, filename):
    """The download the export form asked for, or a page that says why there is none (bad
    parameters, or no rollout matching: an empty file would look like a failed download)."""
    params = request.GET
    fmt, arguments, file = params.get("format", "trajectory"), params.get("arguments", "object"), params.get("file", "jsonl")
    try:
        bounds = {}
        for key in ("min_reward", "max_reward"):
            text = params.get(key, "").strip()
            try:
                bounds[key] = float(text) if text else None
            except ValueError:
                raise InvalidExport(f"{key} must be a number, not {text!r}", field=key) from None
        filters = ExportFilter(decision=params.get("decision", "approved"), **bounds)
        if arguments not in ARGUMENT_MODES:
            raise InvalidExport(f"arguments must be one of {', '.join(ARGUMENT_MODES)}", field="arguments")
        if refusal := export_refusal(rollouts):
            return render(request, "review/export_empty.html", {"problem": refusal, "back": _back(request)}, status=403)
        count = export_count(rollouts, filters=filters, viewer=request.user)
        if count == 0:
            return render(request, "review/export_empty.html", {"filters": filters.describe(), "back": _back(request)})
        return export_response(rollouts, filters=filters, fmt=fmt, arguments=arguments, file=file, filename=filename,
                               viewer=request.user, count=count)
    except InvalidExport as exc:
        return render(request, "review/export_empty.html", {"problem": exc.message, "back": _back(request)}, status=400)


def _back(request) -> str:
    """Where the export form was (same site only), for the "back" link."""
    referer = request.headers.get("Referer", "")
    return referer if referer.startswith(request.build_absolute_uri("/")) else ""
