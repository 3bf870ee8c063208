"""Helpers of the quality tests (a module, not the conftest: `conftest` is a different module for each
test folder, so importing from it depends on which folders pytest was given)."""
from environments.demo import DEMO_DIR


def two_tasks() -> dict:
    """guess-number's first task of two levels, as files to lay over a version: enough for a flaw to
    show in half the rollouts of its five tasks."""
    lines = (DEMO_DIR / "guess_number" / "tasks.jsonl").read_text().splitlines()
    return {"tasks.jsonl": f"{lines[0]}\n{lines[2]}\n"}


def play_audit(audit):
    """Execute every rollout of the audit in this process (the Celery task bodies), then complete it."""
    from runs.quality.services import audit_complete
    from runs.tasks import execute_rollout

    for entry in audit.audit_runs.order_by("id"):
        for rollout_id in entry.run.rollouts.order_by("id").values_list("id", flat=True):
            execute_rollout(rollout_id)
    audit_complete(audit_id=audit.pk)
    audit.refresh_from_db()
    return audit


def passed_audit(team, version):
    """A passed audit of `version` whose episodes repeat: what re-verification by its verifier needs."""
    from runs.quality.models import Audit, AuditStatus

    return Audit.objects.create(team=team, environment_version=version, status=AuditStatus.PASSED, seeds=[0],
                                report={"status": "passed", "determinism": {"pairs": 1, "identical": 1, "divergent": []}, "lines": []})
