"""REST endpoints of the quality lab: audits, re-verification and version A/B (the pages' services)."""
from ninja import Router, Status

from environments.selectors import version_by_label
from studio.auth import require
from studio.errors import DomainError

from ..seeds import parse_seeds
from studio.services import team_training_gate_set

from . import gate, selectors, services, transcripts
from .schemas import AuditIn, AuditOut, GateOut, GateOverrideIn, ReverificationOut, ReverifyIn, ReverifyPreviewOut, TrainingGateIn

router = Router(tags=["quality"])


def audit_out(audit) -> dict:
    return {
        "id": audit.pk, "version": audit.environment_version.label, "status": audit.status, "message": audit.message,
        "seeds": audit.seeds, "created_at": audit.created_at, "finished_at": audit.finished_at,
        "runs": [{"run": entry.run_id, "role": entry.role, "name": entry.name, "status": entry.run.status}
                 for entry in audit.audit_runs.select_related("run").order_by("id")],
        "report": audit.report, "since_parent": selectors.audit_card(audit)["since_parent"],
    }


class BadSeeds(DomainError):
    field = "seeds"


@router.post("/audits", response={202: AuditOut})
def start_audit(request, payload: AuditIn):
    """Queue an audit of a version; 409 when one of that version is already running."""
    require(request, "run")
    version = version_by_label(team=request.team, label=payload.version)
    try:
        seeds = parse_seeds(payload.seeds)
    except ValueError as exc:
        raise BadSeeds(str(exc)) from None
    audit = services.audit_start(version=version, actor=request.user, seeds=seeds)
    return Status(202, audit_out(audit))


@router.get("/audits/{audit_id}", response=AuditOut)
def get_audit(request, audit_id: int):
    return audit_out(selectors.audit_get(team=request.team, audit_id=audit_id))


@router.get("/versions/{label}/audit", response=AuditOut)
def latest_audit(request, label: str):
    """The version's newest audit (404 when it was never audited)."""
    version = version_by_label(team=request.team, label=label)
    audit = selectors.latest_audit(version=version)
    if audit is None:
        from django.http import Http404

        raise Http404(f"{version.label} was never audited")
    return audit_out(audit)


@router.post("/audits/{audit_id}/cancel", response=AuditOut)
def cancel_audit(request, audit_id: int):
    require(request, "run")
    audit = services.audit_cancel(audit=selectors.audit_get(team=request.team, audit_id=audit_id), actor=request.user)
    return audit_out(audit)


def reverification_out(job) -> dict:
    return {
        "id": job.pk, "version": job.environment_version.label, "source": job.source.label, "status": job.status,
        "total": job.total, "replayed": job.replayed, "labelled": job.labelled, "skipped": job.skipped,
        "message": job.message, "created_at": job.created_at, "finished_at": job.finished_at,
    }


@router.post("/reverify", response={202: ReverificationOut})
def reverify(request, payload: ReverifyIn):
    """Queue a re-verification: the source version's stored rollouts re-scored by this version's verifier
    in the background (new verifier labels when it ends). Follow it at GET /reverifications/{id}."""
    require(request, "review")
    version = version_by_label(team=request.team, label=payload.version)
    source = version_by_label(team=request.team, label=payload.source) if payload.source else version
    job = services.reverification_start(version=version, source=source, actor=request.user)
    return Status(202, reverification_out(job))


@router.get("/reverify/preview", response=ReverifyPreviewOut)
def reverify_preview(request, version: str, source: str = ""):
    """What POST /reverify with the same version and source would change, before anything is queued: how
    many labels may change (an upper bound: replays that do not repeat are skipped), how many of those
    rollouts a human decided (their human decision stays current) and how many current labels may change."""
    require(request, "review")
    verifier = version_by_label(team=request.team, label=version)
    rescored = version_by_label(team=request.team, label=source) if source else verifier
    services.reverification_check(version=verifier, source=rescored)
    return selectors.reverification_preview(version=verifier, source=rescored)


@router.get("/reverifications/{reverification_id}", response=ReverificationOut)
def get_reverification(request, reverification_id: int):
    return reverification_out(selectors.reverification_get(team=request.team, reverification_id=reverification_id))


@router.get("/quality/compare")
def compare(request, a: str = "", b: str = "", agent: str = "", agent_b: str = "", runs: str = ""):
    """A/B of two versions (a, b, agent), two agents (a, agent, agent_b) or two runs (runs=12,15). `paired`:
    pairs by (task, seed, repeat), the mean paired difference with a bootstrap 95 % interval, McNemar's test
    of pass/fail and the instances that flip; `result`: the unpaired histograms, per-task differences, mean
    difference with a bootstrap interval and a permutation p-value."""
    return selectors.ab_compare(team=request.team, a=a, b=b, agent=agent, agent_b=agent_b, runs=runs)


class BadPage(DomainError):
    pass


@router.get("/runs/{run_id}/suspicious")
def run_suspicious(request, run_id: int, offset: int = 0, limit: int = 50):
    """Rollouts of the run the transcript scanner lists (scanned on a worker when the run ends), with why:
    a final answer holding many candidates (`shotgun`), a write to a file the verifier may read
    (`verifier_file`), a high return the verifier scores 0 (`farming`). `scanned` is false until the scan
    has run; `count` counts them all, `suspicious` is one page (offset, limit at most 500)."""
    from runs.selectors import run_get

    if offset < 0:
        raise BadPage("offset must be 0 or more.", field="offset")
    if not 1 <= limit <= 500:
        raise BadPage("limit must be from 1 to 500.", field="limit")
    return transcripts.run_suspicious(run=run_get(team=request.team, run_id=run_id), offset=offset, limit=limit)


def gate_out(version) -> dict:
    state = gate.gate_state(version=version)
    override = state["override"]
    return {
        "version": version.label, "enabled": state["enabled"], "flagged": state["flagged"],
        "audit": state["audit"].pk if state["audit"] else None, "blocks": state["blocks"], "message": state["message"],
        "override": None if override is None else {
            "by": override.created_by.username if override.created_by else None, "reason": override.reason,
            "created_at": override.created_at},
    }


@router.get("/versions/{label}/gate", response=GateOut)
def version_gate(request, label: str):
    """What the team's training gate says of a version: whether runs, remote episodes and exports are refused."""
    return gate_out(version_by_label(team=request.team, label=label))


@router.post("/versions/{label}/gate/override", response={201: GateOut})
def version_gate_override(request, label: str, payload: GateOverrideIn):
    """Serve a flagged version to training despite the gate, saying why (recorded with who, for its flagged audit)."""
    require(request, "run")
    version = version_by_label(team=request.team, label=label)
    gate.gate_override(version=version, actor=request.user, reason=payload.reason)
    return Status(201, gate_out(version))


@router.put("/training-gate", response=TrainingGateIn)
def training_gate(request, payload: TrainingGateIn):
    """Turn the team's training gate on or off (owners)."""
    require(request, "manage")
    team_training_gate_set(team=request.team, enabled=payload.enabled)
    return {"enabled": request.team.training_gate}
