"""Pages of the quality lab: the version's quality card (an htmx part), an audit's report, version A/B."""
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from environments import selectors as env_selectors
from environments.views import version_page
from studio.access import team_view
from studio.errors import DomainError
from studio.middleware import checks_its_own_form_fields, checks_its_own_query_fields

from . import gate, selectors, services
from .forms import AuditForm, ReverifyForm


def _version(request, slug, number):
    env = env_selectors.environment_get(team=request.team, slug=slug)
    return env, env_selectors.version_get(environment=env, number=number)


@require_safe
@team_view("read")
def version_card(request, slug, number):
    env, version = _version(request, slug, number)
    return render(request, "quality/_card.html", _card_context(env=env, version=version))


def _card_context(*, env, version, audit_form=None, reverify_form=None) -> dict:
    audit = selectors.latest_audit(version=version)
    refusal = services.reverification_refusal(version=version)
    return {
        "env": env, "version": version, "reverification": selectors.latest_reverification(version=version),
        "can_reverify": not refusal, "reverify_refusal": refusal, **selectors.audit_card(audit),
        "gate": gate.gate_state(version=version),
        "audit_form": audit_form or AuditForm(),
        "reverify_form": reverify_form or ReverifyForm(env=env, version=version, initial={"source": version.number}),
    }


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


def _card_refused(request, *, env, version, audit_form=None, reverify_form=None):
    """The card again with the refusal beside its field and what was typed kept (400): the card alone for
    htmx (it swaps itself), else the version page with the card in place."""
    context = _card_context(env=env, version=version, audit_form=audit_form, reverify_form=reverify_form)
    if request.htmx:
        return render(request, "quality/_card.html", context, status=400)
    card = render_to_string("quality/_card.html", context, request=request)
    return version_page(request, env=env, version=version, quality_card=card, status=400)


def _refused(form, exc: DomainError, field: str) -> None:
    """A service's refusal beside `field` when it names it or the version (the one field of the form)."""
    form.add_error(field if exc.field in (field, "version") else None, exc.message)


def _to_version_page(request, env, version):
    url = reverse("environments:version", kwargs={"team": request.team.slug, "slug": env.slug, "number": version.number})
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


@require_safe
@team_view("review")
@checks_its_own_query_fields
def reverify_confirm(request, slug, number):
    """Before anything is queued: what re-verifying `source`'s rollouts with this version's verifier would
    change, and the button that queues it."""
    env, version = _version(request, slug, number)
    form = ReverifyForm(request.GET, env=env, version=version)
    if not form.is_valid():
        return _card_refused(request, env=env, version=version, reverify_form=form)
    source = form.cleaned_data["source"]
    try:
        services.reverification_check(version=version, source=source)
    except DomainError as exc:
        _refused(form, exc, "source")
        return _card_refused(request, env=env, version=version, reverify_form=form)
    return render(request, "quality/reverify_confirm.html", {
        "env": env, "version": version, "source": source,
        "preview": selectors.reverification_preview(version=version, source=source),
    })


@require_POST
@team_view("review")
@checks_its_own_form_fields
def reverify_start(request, slug, number):
    """Queue a re-verification of a version's stored rollouts (`source`, a version number of the same
    environment; default this one) by this version's verifier; its progress shows on the card."""
    env, version = _version(request, slug, number)
    form = ReverifyForm(request.POST, env=env, version=version)
    if not form.is_valid():
        return _card_refused(request, env=env, version=version, reverify_form=form)
    try:
        job = services.reverification_start(version=version, source=form.cleaned_data["source"], actor=request.user)
    except DomainError as exc:
        _refused(form, exc, "source")
        return _card_refused(request, env=env, version=version, reverify_form=form)
    messages.success(request, f"Re-verification {job.pk} of {job.source.label} by {version.label}'s verifier queued.")
    return _to_version_page(request, env, version)


@require_safe
@team_view("read")
def reverification_part(request, reverification_id):
    """A re-verification's progress (the card polls it while the job runs)."""
    job = selectors.reverification_get(team=request.team, reverification_id=reverification_id)
    return render(request, "quality/_reverification.html", {"reverification": job})


@require_POST
@team_view("run")
@checks_its_own_form_fields
def audit_start(request, slug, number):
    env, version = _version(request, slug, number)
    form = AuditForm(request.POST)
    if not form.is_valid():
        return _card_refused(request, env=env, version=version, audit_form=form)
    try:
        audit = services.audit_start(version=version, actor=request.user, seeds=form.cleaned_data["seeds"])
    except DomainError as exc:  # no tasks, or an audit already running: about the version, not the seeds
        form.add_error("seeds" if exc.field == "seeds" else None, exc.message)
        return _card_refused(request, env=env, version=version, audit_form=form)
    messages.success(request, f"Audit {audit.pk} of {version.label} queued: the card fills in when its runs end.")
    return _to_version_page(request, env, version)


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
