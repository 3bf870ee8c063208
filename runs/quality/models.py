"""An audit of one environment version: the runs it queued and, once they end, its report."""
from django.conf import settings
from django.db import models

from environments.models import EnvironmentVersion
from studio.models import Team


class AuditStatus(models.TextChoices):
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    FLAGGED = "flagged", "Flagged"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


AUDIT_ENDED = (AuditStatus.PASSED, AuditStatus.FLAGGED, AuditStatus.CANCELLED, AuditStatus.FAILED)


class AuditRole(models.TextChoices):
    PROBE = "probe", "Hack probe"
    ORACLE = "oracle", "Oracle"
    DETERMINISM = "determinism", "Determinism pairs"


class Audit(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    environment_version = models.ForeignKey(EnvironmentVersion, on_delete=models.CASCADE, related_name="audits")
    status = models.CharField(max_length=16, choices=AuditStatus.choices, default=AuditStatus.RUNNING)
    seeds = models.JSONField(default=list)
    # Written once, when the audit's runs have all ended: the document `audit_version --json` prints.
    report = models.JSONField(null=True, blank=True)
    message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Two audits of one version at once would race for the same report: the database refuses.
            models.UniqueConstraint(
                fields=["environment_version"], condition=models.Q(status="running"), name="one_running_audit_per_version",
            ),
        ]
        indexes = [models.Index(fields=["environment_version", "-created_at"])]

    def __str__(self):
        return f"audit {self.pk} of {self.environment_version_id}"

    @property
    def is_over(self) -> bool:
        return self.status in AUDIT_ENDED


class AuditRun(models.Model):
    """One run an audit queued: a probe (named), the oracle, or the determinism pairs."""

    audit = models.ForeignKey(Audit, on_delete=models.CASCADE, related_name="audit_runs")
    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="audit_role")
    role = models.CharField(max_length=16, choices=AuditRole.choices)
    name = models.CharField(max_length=120)

    class Meta:
        ordering = ["id"]


from . import hooks  # noqa: E402,F401 - connects the run-ended hook when the models load
