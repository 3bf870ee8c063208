"""Migration 0026 (runs by purpose) on runs written as of 0025: an audit's runs become audits, remote-agent
runs sessions, human-agent runs plays, the rest evaluations; the open review states of probe and determinism
rollouts close (the oracle's stay open). Reversed, those reopen."""
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from tests.review.conftest import ENV_PY
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = "0025_audit_warnings", "0026_run_purpose"
# Where the test leaves the database: the newest migration of runs.
LATEST = max(name for app, name in MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes() if app == "runs")


def _migrate(target: str):
    MigrationExecutor(connection).migrate([("runs", target)])
    return MigrationExecutor(connection).loader.project_state([("runs", target)]).apps


def _open_by_role() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT a.name, s.open FROM runs_reviewstate s JOIN runs_rollout r ON r.id = s.rollout_id"
                       " JOIN runs_auditrun a ON a.run_id = r.run_id")
        return dict(cursor.fetchall())


def test_0026_classifies_runs_and_closes_probe_review_states_and_reverses(team, owner):
    version = package_version(team, owner, "purposes", ENV_PY)
    try:
        apps = _migrate(BEFORE)
        Agent, Run, Rollout, Label, Audit, AuditRun = (apps.get_model("runs", name) for name in (
            "Agent", "Run", "Rollout", "RewardLabel", "Audit", "AuditRun"))

        def run_of(kind, name):
            agent = Agent.objects.create(team_id=team.pk, name=name, kind=kind)
            run = Run.objects.create(team_id=team.pk, environment_version_id=version.pk, agent=agent, task_ids=["t1"],
                                     seeds=[0], status="finished")
            rollout = Rollout.objects.create(team_id=team.pk, run=run, task_id="t1", seed=0, status="succeeded",
                                             verifier_reward=1.0, total_reward=1.0)
            Label.objects.create(team_id=team.pk, rollout=rollout, source="verifier", value=1.0, decision="proposed")
            return run.pk

        runs = {name: run_of(kind, name) for kind, name in [("scripted", "solver"), ("remote", "remote"), ("human", "human"),
                                                            ("scripted", "probe-noop"), ("random", "random"), ("scripted", "oracle")]}
        audit = Audit.objects.create(team_id=team.pk, environment_version_id=version.pk, seeds=[0], status="passed")
        for name, role in [("probe-noop", "probe"), ("random", "determinism"), ("oracle", "oracle")]:
            AuditRun.objects.create(audit=audit, run_id=runs[name], role=role, name=name)
        assert _open_by_role() == {"probe-noop": True, "random": True, "oracle": True}  # the symptom

        apps = _migrate(AFTER)
        purposes = dict(apps.get_model("runs", "Run").objects.values_list("agent__name", "purpose"))
        assert purposes == {"solver": "evaluation", "remote": "session", "human": "play", "probe-noop": "audit",
                            "random": "audit", "oracle": "audit"}
        assert _open_by_role() == {"probe-noop": False, "random": False, "oracle": True}

        _migrate(BEFORE)
        assert _open_by_role() == {"probe-noop": True, "random": True, "oracle": True}
    finally:
        _migrate(LATEST)
