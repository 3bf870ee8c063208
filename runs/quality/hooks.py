"""What the quality lab does when a run ends: an audit's run enqueues the audit's completion, and every
run the scan of its transcripts (no web request ever polls for either). Called by the rollout lifecycle (runs/episodes/status.py) and run_cancel."""
from studio.celery import task_send_on_commit

from .models import AuditRun

COMPLETE_AUDIT = "runs.quality.tasks.complete_audit"
SCAN_TRANSCRIPTS = "runs.quality.tasks.scan_transcripts"


def audit_run_ended(*, run_id: int) -> None:
    """The run ended (finished or cancelled): if it belongs to an audit, the audit's report is due."""
    audit_id = AuditRun.objects.filter(run_id=run_id).values_list("audit_id", flat=True).first()
    if audit_id is not None:
        task_send_on_commit(COMPLETE_AUDIT, audit_id)


def run_transcripts_due(*, run_id: int) -> None:
    """The run ended: a worker scans its stored rollouts for suspicious ones (runs/quality/transcripts.py)."""
    task_send_on_commit(SCAN_TRANSCRIPTS, run_id)
