"""The training gate: a team may refuse to serve a version whose latest audit is `flagged` to training
(evaluation runs, remote episodes through the sessions API, OpenEnv, MCP and gym clients, and exports)
unless a member who may run overrides it for that audit, saying why. Audits, re-verifications and plays
are never gated: they are how a flagged version gets looked at and fixed.

One rule (`gate_state`) for every door: run_create and episode_open ask `ensure_version_servable`, the
export download asks `gated_versions`, the version page shows `gate_state`."""
from django.db import transaction

from studio.errors import DomainError

from .models import Audit, AuditStatus, GateOverride

# Audits that have a verdict; a running, cancelled or failed audit says nothing about the version.
JUDGED = (AuditStatus.PASSED, AuditStatus.WARNINGS, AuditStatus.FLAGGED)
REASON_MAX = 2000


class VersionGated(DomainError):
    """A flagged version the team's gate keeps from training (403, field `version`)."""

    status = 403

    def __init__(self, message: str):
        super().__init__(message, field="version")


class InvalidOverride(DomainError):
    pass


def judged_audit(*, version) -> Audit | None:
    """The version's newest audit that reached a verdict."""
    return Audit.objects.filter(environment_version=version, status__in=JUDGED).order_by("-created_at", "-id").first()


def gate_state(*, version) -> dict:
    """What the gate says of `version`: {enabled, audit, flagged, override, blocks, message}. `blocks` is
    True when the team's gate is on, the newest judged audit is flagged and no override answers it."""
    team = version.environment.team
    audit = judged_audit(version=version)
    flagged = audit is not None and audit.status == AuditStatus.FLAGGED
    override = (
        GateOverride.objects.filter(environment_version=version, audit=audit).select_related("created_by")
        .order_by("-created_at", "-id").first() if flagged else None
    )
    blocks = bool(team.training_gate and flagged and override is None)
    message = (
        f"{version.label} is flagged by its audit {audit.pk}, and the team's training gate keeps flagged versions from"
        " training (runs, remote episodes, exports). Fix what the audit found, or override the gate on the version's"
        " page, saying why." if blocks else ""
    )
    return {"enabled": team.training_gate, "audit": audit, "flagged": flagged, "override": override,
            "blocks": blocks, "message": message}


def ensure_version_servable(*, version) -> None:
    """Raise VersionGated when the team's gate keeps `version` from training."""
    state = gate_state(version=version)
    if state["blocks"]:
        raise VersionGated(state["message"])


def gated_versions(*, versions) -> list:
    """The versions among `versions` the gate keeps from training (an export that holds their rollouts is refused)."""
    return [version for version in versions if gate_state(version=version)["blocks"]]


def gate_override(*, version, actor, reason: str) -> GateOverride:
    """Let the flagged `version` be served despite the gate, for its newest judged audit, saying why."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidOverride("Say why the flagged version may be served to training.", field="reason")
    if len(reason) > REASON_MAX:
        raise InvalidOverride(f"The reason is {len(reason)} characters; the most is {REASON_MAX}.", field="reason")
    with transaction.atomic():
        audit = judged_audit(version=version)
        if audit is None or audit.status != AuditStatus.FLAGGED:
            raise InvalidOverride(f"{version.label} is not flagged by its latest audit: there is nothing to override.",
                                  field="version")
        return GateOverride.objects.create(team=version.environment.team, environment_version=version, audit=audit,
                                           reason=reason, created_by=actor)
