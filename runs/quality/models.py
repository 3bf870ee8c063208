"""An audit of one environment version: the runs it queued and, once they end, its report."""
from django.conf import settings
from django.db import models

from environments.models import EnvironmentVersion
from studio.models import Team


class AuditStatus(models.TextChoices):
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"  # every line green
    WARNINGS = "warnings", "Warnings"  # some amber, none red
    FLAGGED = "flagged", "Flagged"  # any red
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


AUDIT_ENDED = (AuditStatus.PASSED, AuditStatus.WARNINGS, AuditStatus.FLAGGED, AuditStatus.CANCELLED, AuditStatus.FAILED)


class AuditRole(models.TextChoices):
    PROBE = "probe", "Hack probe"
    ORACLE = "oracle", "Oracle"
    DETERMINISM = "determinism", "Determinism pairs"


class Audit(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    environment_version = models.ForeignKey(EnvironmentVersion, on_delete=models.CASCADE, related_name="audits")
    status = models.CharField(max_length=16, choices=AuditStatus.choices, default=AuditStatus.RUNNING)
    seeds = models.JSONField(default=list)
    # What an agent of this version is shown besides its observations (the tools of its first task,
    # learnt in one sandbox at the start): the leak scan searches it for hidden answers.
    interface = models.JSONField(default=dict, blank=True)
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



class ReverificationStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class Reverification(models.Model):
    """A background job that re-scores the stored rollouts of `source` with `environment_version`'s
    verifier by replaying their actions. Its new `verifier` labels are written together when it ends
    (append-only, never over an earlier label): a failed job leaves none."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    environment_version = models.ForeignKey(EnvironmentVersion, on_delete=models.CASCADE, related_name="reverifications")
    source = models.ForeignKey(EnvironmentVersion, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=ReverificationStatus.choices, default=ReverificationStatus.QUEUED)
    total = models.PositiveIntegerField(default=0)
    replayed = models.PositiveIntegerField(default=0)  # progress: rollouts replayed so far
    labelled = models.PositiveIntegerField(default=0)
    skipped = models.JSONField(default=list)  # [{rollout, reason}] of rollouts whose replay did not repeat
    message = models.TextField(blank=True)
    # Fences the final write: a redelivered job that took over makes the older attempt's result void.
    attempts = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(replayed__lte=models.F("total")), name="reverification_progress_in_range"),
        ]

    def __str__(self):
        return f"re-verification {self.pk} of {self.source_id} by {self.environment_version_id}"

    @property
    def is_over(self) -> bool:
        return self.status in (ReverificationStatus.DONE, ReverificationStatus.FAILED)

    @property
    def percent(self) -> int:
        return round(100 * self.replayed / self.total) if self.total else 100




class GateOverride(models.Model):
    """Someone let a flagged version be served to training despite the team's gate, and said why. It holds
    for the audit it answered: a newer flagged audit needs a new override. Append-only."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    environment_version = models.ForeignKey(EnvironmentVersion, on_delete=models.CASCADE, related_name="gate_overrides")
    audit = models.ForeignKey(Audit, on_delete=models.CASCADE, related_name="gate_overrides")
    reason = models.TextField(max_length=2000)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["environment_version", "-created_at"])]

class TranscriptScan(models.Model):
    """The transcript scanner's pass over one run's stored rollouts (runs/quality/transcripts.py), done on a
    worker when the run ends: the run page and `GET /runs/{id}/suspicious` read it, never scan themselves."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="transcript_scan")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    rollouts = models.PositiveIntegerField(default=0)  # how many rollouts the pass read
    suspicious = models.PositiveIntegerField(default=0)
    scanned_at = models.DateTimeField()


class SuspiciousRollout(models.Model):
    """A rollout the scanner lists, with why: [{"check": "shotgun" | "verifier_file" | "farming", "text": ...}]."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="suspicious_rollouts")
    rollout = models.OneToOneField("runs.Rollout", on_delete=models.CASCADE, related_name="suspicion")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    reasons = models.JSONField(default=list)

    class Meta:
        ordering = ["rollout_id"]
        indexes = [models.Index(fields=["run", "rollout"], name="suspicious_run_rollout")]
