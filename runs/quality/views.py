"""Pages of the quality lab: the version's quality card (an htmx part), an audit's report, version A/B."""
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from environments import selectors as env_selectors
from studio.access import team_view
from studio.errors import DomainError

from ..seeds import parse_seeds

from . import gate, selectors, services


def _version(request, slug, number):
    env = env_selectors.environment_get(team=request.team, slug=slug)
    return env, env_selectors.version_get(environment=env, number=number)


@require_safe
@team_view("read")
def version_card(request, slug, number):
    env, version = _version(request, slug, number)
    audit = selectors.latest_audit(version=version)
    refusal = services.reverification_refusal(version=version)
    return render(request, "quality/_card.html", {
        "env": env, "version": version, "reverification": selectors.latest_reverification(version=version),
        "can_reverify": not refusal, "reverify_refusal": refusal, **selectors.audit_card(audit),
        "gate": gate.gate_state(version=version),
    })


@require_POST
@team_view("run")
def gate_override(request, slug, number):
    """Serve the flagged version to training despite the team's gate, saying why (recorded with who)."""
    env, version = _version(request, slug, number)
    try:
        gate.gate_override(version=version, actor=request.user, reason=request.POST.get("reason", ""))
        messages.success(request, f"{version.label} may be served to training despite its flagged audit; your reason is recorded.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect("environments:version", team=request.team.slug, slug=env.slug, number=version.number)


def _reverify_source(request, env, version, params):
    """The source version a re-verification form names (default: this one); a message and None when bad."""
    try:
        source_number = int(params.get("source") or version.number)
    except ValueError:
        messages.error(request, "Source: give a version number of this environment.")
        return None
    try:
        return env_selectors.version_get(environment=env, number=source_number)
    except Http404:
        messages.error(request, f"Source: {env.slug} has no version {source_number}.")
        return None


@require_safe
@team_view("review")
def reverify_confirm(request, slug, number):
    """Before anything is queued: what re-verifying `source`'s rollouts with this version's verifier would
    change, and the button that queues it."""
    env, version = _version(request, slug, number)
    source = _reverify_source(request, env, version, request.GET)
    back = redirect("environments:version", team=request.team.slug, slug=env.slug, number=version.number)
    if source is None:
        return back
    try:
        services.reverification_check(version=version, source=source)
    except DomainError as exc:
        messages.error(request, exc.message)
        return back
    return render(request, "quality/reverify_confirm.html", {
        "env": env, "version": version, "source": source,
        "preview": selectors.reverification_preview(version=version, source=source),
    })


@require_POST
@team_view("review")
def reverify_start(request, slug, number):
    """Queue a re-verification of a version's stored rollouts (`source`, a version number of the same
    environment; default this one) by this version's verifier; its progress shows on the card."""
    env, version = _version(request, slug, number)
    source = _reverify_source(request, env, version, request.POST)
    if source is not None:
        try:
            job = services.reverification_start(version=version, source=source, actor=request.user)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Re-verification {job.pk} of {job.source.label} by {version.label}'s verifier queued.")
    return redirect("environments:version", team=request.team.slug, slug=env.slug, number=version.number)


@require_safe
@team_view("read")
def reverification_part(request, reverification_id):
    """A re-verification's progress (the card polls it while the job runs)."""
    job = selectors.reverification_get(team=request.team, reverification_id=reverification_id)
    return render(request, "quality/_reverification.html", {"reverification": job})


@require_POST
@team_view("run")
def audit_start(request, slug, number):
    env, version = _version(request, slug, number)
    try:
        seeds = parse_seeds(request.POST.get("seeds") or "0-4")
        audit = services.audit_start(version=version, actor=request.user, seeds=seeds)
    except ValueError as exc:
        messages.error(request, f"Seeds: {exc}")
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Audit {audit.pk} of {version.label} queued: the card fills in when its runs end.")
    return redirect("environments:version", team=request.team.slug, slug=env.slug, number=version.number)


@require_POST
@team_view("run")
def audit_cancel(request, audit_id):
    audit = selectors.audit_get(team=request.team, audit_id=audit_id)
    services.audit_cancel(audit=audit, actor=request.user)
    messages.success(request, f"Audit {audit.pk} cancelled.")
    return redirect("quality:audit", team=request.team.slug, audit_id=audit.pk)


@require_safe
@team_view("read")
def audit_detail(request, audit_id):
    audit = selectors.audit_get(team=request.team, audit_id=audit_id)
    runs = audit.audit_runs.select_related("run__agent").order_by("id")
    return render(request, "quality/audit.html", {
        "audit": audit, "version": audit.environment_version, "env": audit.environment_version.environment,
        "report": audit.report, "runs": runs, **selectors.audit_card(audit),
    })


@require_safe
@team_view("read")
def version_ab(request):
    """?a=slug@1&b=slug@2&agent=NAME (the same agent on two versions), &agent_b=NAME (two agents) or
    ?runs=12,15 (two runs): the paired result first, then the unpaired figures."""
    params = {key: request.GET.get(key, "").strip() for key in ("a", "b", "agent", "agent_b", "runs")}
    context = {"params": params, "result": None, "error": ""}
    if any(params.values()):
        try:
            context.update(selectors.ab_compare(team=request.team, **params))
        except DomainError as exc:
            context["error"] = exc.message
        except Http404 as exc:
            context["error"] = str(exc) or "Not found in this team."
    if context["result"] and context["result"]["histogram"]:
        hist = context["result"]["histogram"]
        top = max(hist["a"] + hist["b"]) or 1
        context["bars"] = [
            {"lo": hist["edges"][i], "hi": hist["edges"][i + 1], "a": hist["a"][i], "b": hist["b"][i],
             "a_pct": round(100 * hist["a"][i] / top), "b_pct": round(100 * hist["b"][i] / top)}
            for i in range(len(hist["a"]))
        ]
    return render(request, "quality/ab.html", context)
