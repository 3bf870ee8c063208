"""When a run of an audit ends, enqueue the audit's completion (no web request ever polls for it)."""
from django.db.models.signals import post_save
from django.dispatch import receiver

from .tasks import complete_audit

RUN_ENDED = ("finished", "cancelled")


@receiver(post_save, sender="runs.Run", dispatch_uid="quality-run-ended")
def run_saved(sender, instance, update_fields=None, **kwargs):
    if instance.status not in RUN_ENDED or (update_fields is not None and "status" not in update_fields):
        return
    from .models import AuditRun

    audit_id = AuditRun.objects.filter(run_id=instance.pk).values_list("audit_id", flat=True).first()
    if audit_id is not None:
        complete_audit.delay_on_commit(audit_id)
