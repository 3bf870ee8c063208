"""Celery tasks of the quality lab: thin, id-taking, idempotent."""
from celery import shared_task

from .hooks import COMPLETE_AUDIT, SCAN_TRANSCRIPTS
from .services import EXECUTE_REVERIFICATION, audit_complete, reverification_execute
from .transcripts import run_scan


@shared_task(name=COMPLETE_AUDIT, acks_late=True, ignore_result=True)
def complete_audit(audit_id: int) -> str:
    """Store the audit's report if all its runs have ended. Safe to deliver twice: an ended audit is left alone."""
    return audit_complete(audit_id=audit_id)


@shared_task(name=EXECUTE_REVERIFICATION, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def execute_reverification(reverification_id: int) -> str:
    """Re-score the job's stored rollouts. Safe to deliver twice: an ended job is left alone, and a
    job redelivered after its worker died starts over, fencing out the older attempt's write."""
    return reverification_execute(reverification_id=reverification_id)


@shared_task(name=SCAN_TRANSCRIPTS, acks_late=True, ignore_result=True)
def scan_transcripts(run_id: int) -> str:
    """Scan the ended run's stored rollouts for suspicious ones. Safe to deliver twice: a scan replaces the
    run's earlier one, and a run deleted since is left alone."""
    return run_scan(run_id=run_id)
