"""Celery tasks of the quality lab: thin, id-taking, idempotent."""
from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def complete_audit(audit_id: int) -> str:
    """Store the audit's report if all its runs have ended. Safe to deliver twice: an ended audit is left alone."""
    from .services import audit_complete

    return audit_complete(audit_id=audit_id)
