"""Audits through a real Celery worker, Redis and PostgreSQL: the flawed guess-number variants are
flagged by the right check with the rollout that shows it; the demo is green; the CLI prints the
report; the completion hook (not a poll) stores it."""
import json
from io import StringIO

import pytest
from django.core.management import call_command

from runs.models import Rollout, RunPurpose, Step
from runs.review.selectors import QueueFilters, review_queue_page
from runs.quality import services
from runs.quality.models import AuditStatus
from tests.quality.audits import two_tasks
from tests.processes import celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def finished(audit, timeout=420):
    def over():
        audit.refresh_from_db()
        return audit.is_over

    wait_for(over, timeout, f"audit {audit.pk} to end")
    return audit


def line(report, check):
    return next(entry for entry in report["lines"] if entry["check"] == check)


def test_claim_trusting_verifier_is_flagged_by_the_claim_probe_with_its_rollout(make_version, owner, celery_worker):
    version = make_version("guess_claim", extra=two_tasks())
    audit = finished(services.audit_start(version=version, actor=owner, seeds=[0]))
    assert audit.status == AuditStatus.FLAGGED
    report = audit.report
    claim = next(probe for probe in report["probes"] if probe["name"] == "claim")
    assert claim["flagged"] and claim["mean_reward"] > 0.5
    flagged = line(report, "probe:claim")
    assert flagged["level"] == "red"
    # The linked rollout shows the hack: the claim probe's answer that ended it says "correct" and the verifier
    # paid (its episode may lead with another kind of candidate: they rotate across episodes).
    rollout = Rollout.objects.get(pk=flagged["rollout"])
    assert rollout.verifier_reward == 1.0 and rollout.run.agent.name.startswith("probe-claim")
    assert "correct" in json.dumps(Step.objects.filter(rollout=rollout).order_by("-index").first().action).lower()
    for name in ("noop", "peek"):
        assert line(report, f"probe:{name}")["level"] == "green"
    assert line(report, "determinism")["level"] == "green"
    assert line(report, "oracle")["level"] == "green"
    assert any("claim" in sentence for sentence in report["flags"])
    # Its runs are audits: not in the runs list, and its probe and determinism rollouts never wait for review.
    assert set(audit.audit_runs.values_list("run__purpose", flat=True)) == {RunPurpose.AUDIT}
    oracle = audit.audit_runs.get(role="oracle").run
    for purpose in (RunPurpose.EVALUATION, RunPurpose.AUDIT, None):
        waiting = review_queue_page(team=version.environment.team, reviewer=owner, filters=QueueFilters(purpose=purpose))
        assert {r.run_id for r in waiting} <= ({oracle.pk} if purpose != RunPurpose.EVALUATION else set())
    assert review_queue_page(team=version.environment.team, reviewer=owner, filters=QueueFilters(purpose=RunPurpose.AUDIT))


def test_clock_reading_environment_is_flagged_by_determinism_with_its_first_divergent_step(make_version, owner, celery_worker):
    version = make_version("guess_clock", extra=two_tasks())
    audit = finished(services.audit_start(version=version, actor=owner, seeds=[0]))
    report = audit.report
    assert audit.status == AuditStatus.FLAGGED
    det = report["determinism"]
    assert det["pairs"] == 2 and det["divergent"]
    first = det["divergent"][0]
    assert first["first_divergent_step"] == 0 and "observation" in first["reason"]
    assert line(report, "determinism")["rollout"] in first["rollouts"]
    assert all(not probe["flagged"] for probe in report["probes"])


def test_demo_guess_number_gets_a_green_card_and_the_cli_prints_the_report(make_version, owner, team, celery_worker):
    make_version("guess_number")
    out = StringIO()
    call_command("audit_version", "guess-number@1", "--team", team.slug, "--seeds", "0", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["version"] == "guess-number@1" and report["status"] == "passed", report["flags"]
    assert {probe["name"] for probe in report["probes"]} == {"noop", "random", "claim", "peek"}
    assert report["oracle"] == {**report["oracle"], "solved": 5, "tasks": 5, "unsolved": []}
    assert report["determinism"]["pairs"] == 5 and report["determinism"]["divergent"] == []
    assert [level["difficulty"] for level in report["difficulty"]] == [1, 2, 3]
    assert all(entry["level"] == "green" for entry in report["lines"]), report["lines"]
    assert report["flags"] == []


# Seeds on which frozen_lake's optimal policy crosses both slippery lakes (a slippery lake throws any
# policy into a hole on some seeds: the oracle check counts a task solved when one of its seeds is).
@pytest.mark.parametrize(("name", "seeds"), [("frozen_lake", [1, 2]), ("inventory_tools", [0])])
def test_the_other_python_demos_get_a_green_card(make_version, owner, celery_worker, name, seeds):
    version = make_version(name)
    audit = finished(services.audit_start(version=version, actor=owner, seeds=seeds))
    assert audit.status == AuditStatus.PASSED, audit.report["flags"]
    assert [entry for entry in audit.report["lines"] if entry["level"] != "green"] == []
    assert all(not probe["crashes"] for probe in audit.report["probes"])
