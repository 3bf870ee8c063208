"""The environments list's audit badge: each environment's newest audit state."""
from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from runs.quality.gate import gate_state
from runs.quality.models import Audit

register = template.Library()


@register.simple_tag
def audit_badge(env):
    audit = Audit.objects.filter(environment_version__environment=env).select_related("environment_version").first()
    if audit is None:
        return mark_safe('<div class="small envcard-audit muted">Not audited</div>')  # constant text
    gated = env.team.training_gate and audit.status == "flagged" and gate_state(version=audit.environment_version)["blocks"]
    return format_html(
        '<div class="small envcard-audit">Audit <span class="badge audit-{}" data-audit-status="{}">{}</span> @{}{}</div>',
        audit.status, audit.status, audit.get_status_display(), audit.environment_version.number,
        mark_safe(' <span class="badge gate-blocked" title="the team\'s training gate keeps it from training">gated</span>') if gated else "",
    )


@register.simple_tag
def version_audit_badge(version):
    """A version's newest judged audit as a badge, and whether the team's training gate keeps it from training."""
    state = gate_state(version=version)
    audit = state["audit"]
    if audit is None:
        return mark_safe('<span class="muted small">not audited</span>')  # constant text
    blocked = mark_safe(' <span class="badge gate-blocked" title="the team\'s training gate keeps it from training">gated</span>') if state["blocks"] else ""
    return format_html('<span class="badge audit-{}" data-audit-status="{}">{}</span>{}', audit.status, audit.status,
                       audit.get_status_display(), blocked)
