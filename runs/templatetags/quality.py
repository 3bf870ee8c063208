"""The environments list's audit badge: each environment's newest audit state."""
from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from runs.quality.models import Audit

register = template.Library()


@register.simple_tag
def audit_badge(env):
    audit = Audit.objects.filter(environment_version__environment=env).select_related("environment_version").first()
    if audit is None:
        return mark_safe('<div class="small envcard-audit muted">Not audited</div>')  # constant text
    return format_html(
        '<div class="small envcard-audit">Audit <span class="badge audit-{}" data-audit-status="{}">{}</span> @{}</div>',
        audit.status, audit.status, audit.get_status_display(), audit.environment_version.number,
    )
