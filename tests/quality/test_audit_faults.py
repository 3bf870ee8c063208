"""Bad input and faults: each ends with a clear state and message, nothing half-written. Rollouts run
in this process (the Celery task bodies); the worker path is test_audit_worker.py's."""
import pytest

from runs import services as run_services
from runs.models import RolloutStatus, Run, RunStatus
from runs.quality import services
from runs.quality.models import Audit, AuditStatus
from django.urls import reverse

from runs.protocols.openenv import metadata_of
from tests.conftest import api_for, login
from tests.runs.rollout_factories import package_version

from tests.quality.audits import play_audit

pytestmark = pytest.mark.django_db(transaction=True)

STEPPER = """
class Env:
    action_space = {"type": "discrete", "n": 3}

    def reset(self, task, seed):
        self.n = 0
        return 0

    def step(self, action):
        if action == 0 and task_crash:
            raise RuntimeError("cannot take action 0")
        self.n += 1
        return self.n, 0.0, self.n >= 2, False, {}

    def verify(self):
        return 0.0, "nothing to reward"

task_crash = CRASH
"""

RAISING_ORACLE = "def act(observation, info):\n    raise ValueError('the oracle is broken')\n"


def stepper(team, owner, slug, *, crash=False, files=None):
    version = package_version(team, owner, slug, STEPPER.replace("CRASH", str(crash)), max_steps=3)
    if files:
        from environments import services as env_services

        version = env_services.version_commit(environment=version.environment, actor=owner, message="more",
                                              files={**version.files, **files})
    return version


def test_an_environment_that_crashes_under_a_probe_is_a_finding_not_a_failed_audit(team, owner):
    version = stepper(team, owner, "crashy", crash=True)
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0]))
    crash = next(line for line in audit.report["lines"] if line["check"] == "probe:noop:crash")
    assert crash["level"] == "amber" and crash["id"] == "probe.crash" and "cannot take action 0" in crash["text"]
    assert crash["rollout"] is not None
    # Amber lines (the crash, no oracle) and no red one: the audit says so in one word, everywhere.
    assert {line["level"] for line in audit.report["lines"]} == {"green", "amber"}, audit.report["lines"]
    assert audit.status == AuditStatus.WARNINGS and audit.report["status"] == "warnings"
    checks = {check["id"]: check for check in audit.report["checks"]}
    assert (checks["probe.crash"]["level"], checks["probe.crash"]["property"]) == ("amber", "secure")
    client = login(owner)
    card = client.get(reverse("quality:card", kwargs={"team": team.slug, "slug": "crashy", "number": 1})).content.decode()
    assert 'data-audit-status="warnings">Warnings<' in card
    listing = client.get(reverse("environments:list", kwargs={"team": team.slug})).content.decode()
    assert 'class="badge audit-warnings" data-audit-status="warnings">Warnings</span> @1' in listing
    api = api_for(owner, team).get("/versions/crashy@1/audit").json()
    assert api["status"] == "warnings" and api["report"]["status"] == "warnings"
    assert f"Quality audit: warnings (audit {audit.pk})." in metadata_of(version)["description"]


def test_an_oracle_that_raises_is_reported_on_the_card(team, owner):
    version = stepper(team, owner, "oracled", files={"oracle.py": RAISING_ORACLE})
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0]))
    assert audit.status == AuditStatus.FLAGGED
    oracle = next(line for line in audit.report["lines"] if line["check"] == "oracle")
    assert oracle["level"] == "red" and "the oracle is broken" in oracle["text"]
    assert audit.report["oracle"]["unsolved"] == ["t1"]


def test_a_version_without_tasks_is_refused_with_a_reason(team, owner):
    version = stepper(team, owner, "empty")
    # Packages are validated on commit today; a version stored before that rule can still have none.
    from environments.models import EnvironmentVersion

    empty = EnvironmentVersion.objects.create(
        environment=version.environment, number=2, parent=version, files={**version.files, "tasks.jsonl": ""},
        manifest=version.manifest, tasks=[], content_hash="0" * 64, author=owner, message="no tasks",
    )
    with pytest.raises(services.InvalidAudit, match="has no tasks"):
        services.audit_start(version=empty, actor=owner)
    assert not Audit.objects.filter(environment_version=empty).exists()


def test_a_second_audit_of_a_running_one_is_refused_and_writes_nothing(team, owner):
    version = stepper(team, owner, "twice")
    first = services.audit_start(version=version, actor=owner, seeds=[0])
    runs_before = Run.objects.count()
    with pytest.raises(services.AuditRunning, match=f"already running \\(audit {first.pk}\\)"):
        services.audit_start(version=version, actor=owner, seeds=[0])
    assert Run.objects.count() == runs_before and Audit.objects.count() == 1


def test_a_cancelled_audit_ends_cancelled_with_its_runs_and_no_report(team, owner):
    version = stepper(team, owner, "cancelled")
    audit = services.audit_start(version=version, actor=owner, seeds=[0])
    services.audit_cancel(audit=audit, actor=owner)
    audit.refresh_from_db()
    assert audit.status == AuditStatus.CANCELLED and audit.report is None and "Cancelled by olivia" in audit.message
    assert set(Run.objects.filter(audit_role__audit=audit).values_list("status", flat=True)) == {RunStatus.CANCELLED}
    assert services.audit_complete(audit_id=audit.pk) == "nothing to do"
    # Once it has ended, the version can be audited again.
    assert services.audit_start(version=version, actor=owner, seeds=[0]).status == AuditStatus.RUNNING


def test_cancelling_one_of_its_runs_ends_the_audit_cancelled_naming_the_run(team, owner):
    version = stepper(team, owner, "onecancel")
    audit = services.audit_start(version=version, actor=owner, seeds=[0])
    probe = audit.audit_runs.get(name="claim")
    run_services.run_cancel(run=probe.run, actor=owner)
    audit = play_audit(audit)
    assert audit.status == AuditStatus.CANCELLED and audit.report is None
    assert f"run {probe.run_id} (claim)" in audit.message
    assert not probe.run.rollouts.filter(status=RolloutStatus.RUNNING).exists()
