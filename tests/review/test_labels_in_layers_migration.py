"""Migration 0024 (labels in layers) on data shaped like issue 26.1, written under the rules as of 0023: eight
decided rollouts (6 approved, 1 rejected, 1 overridden to 0.5), then a re-verification by v2 whose labels
became every rollout's latest. Forward, the human labels are current again and the figures agree; backward,
the tallies are as they were and no label is gone."""
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from environments import services as env_services
from runs.models import ReviewState, RewardLabel, Run
from runs.review import selectors
from runs.review.export import ExportFilter, export_count
from tests.review.conftest import ENV_PY
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = "0023_database_rules_from_sql_files", "0024_labels_in_layers"
# Where the test leaves the database: the newest migration of runs, whatever comes after this one.
LATEST = max(name for app, name in MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes() if app == "runs")
REWARDS = (1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0)


def _migrate(target: str):
    executor = MigrationExecutor(connection)
    executor.migrate([("runs", target)])
    return MigrationExecutor(connection).loader.project_state([("runs", target)]).apps


def _rows(sql: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return sorted(cursor.fetchall(), key=repr)


TALLY_SQL = {
    "review state": "SELECT rollout_id, proposed_reward, has_proposal, deciders, decider_ids, open FROM runs_reviewstate",
    "agreement": "SELECT run_id, rollout_id, shard, reviewed, approved, rejected, overridden, decisions, tt, tf, ft, ff,"
                 " multi, pairs, agreeing, deciders FROM runs_agreementtally",
    "blind": "SELECT run_id, reviewer_id, shard, reviewed, decisions, tt, tf, ft, ff FROM runs_blindtally"
             " WHERE (reviewed, decisions, tt, tf, ft, ff) <> (0, 0, 0, 0, 0, 0)",
    "labels": "SELECT id, rollout_id, source, value, decision, reviewer_id, rationale, created_at FROM runs_rewardlabel",
}


def _latest_is_human() -> int:
    """Rollouts whose newest label is a human decision (what "current" meant before 0024)."""
    return _rows("SELECT count(*) FROM runs_rollout r WHERE (SELECT source FROM runs_rewardlabel l WHERE l.rollout_id = r.id"
                 " ORDER BY created_at DESC, id DESC LIMIT 1) = 'human'")[0][0]


def _affected_shape(apps, *, team, owner, v1, v2) -> int:
    """The issue's data, written through the models as of 0023 (their triggers keep the tallies)."""
    Agent, Run0023, Rollout, Label = (apps.get_model("runs", name) for name in ("Agent", "Run", "Rollout", "RewardLabel"))
    agent = Agent.objects.create(team_id=team.pk, name="random", kind="random")
    run = Run0023.objects.create(team_id=team.pk, environment_version_id=v1.pk, agent=agent, task_ids=["t1"], seeds=[0],
                                 status="finished")
    rollouts = [Rollout.objects.create(team_id=team.pk, run=run, task_id="t1", seed=i, status="succeeded",
                                       verifier_reward=reward, total_reward=reward) for i, reward in enumerate(REWARDS)]
    for r in rollouts:
        Label.objects.create(team_id=team.pk, rollout=r, source="verifier", value=r.verifier_reward, decision="proposed")
    decisions = ["approved"] * 6 + ["rejected", "overridden"]
    for r, decision in zip(rollouts, decisions):
        value = {"approved": r.verifier_reward, "rejected": None, "overridden": 0.5}[decision]
        Label.objects.create(team_id=team.pk, rollout=r, source="human", value=value, decision=decision,
                             reviewer_id=owner.pk, rationale="reviewed")
    for r in rollouts:  # v2's lenient verifier passes everything
        Label.objects.create(team_id=team.pk, rollout=r, source="verifier", value=1.0, decision="proposed",
                             rationale=f"re-verified by {v2.label}: looks fine")
    return run.pk


@pytest.fixture
def versions(team, owner):
    v1 = package_version(team, owner, "layered", ENV_PY)
    v2 = env_services.version_commit(environment=v1.environment, actor=owner, message="lenient", files=v1.files)
    return v1, v2


def test_0024_makes_the_human_labels_current_again_and_reverses_to_the_same_tallies(team, owner, versions):
    v1, v2 = versions
    try:
        apps = _migrate(BEFORE)
        run_id = _affected_shape(apps, team=team, owner=owner, v1=v1, v2=v2)
        assert _latest_is_human() == 0  # the bug: every rollout's newest label is v2's proposal
        as_of_0023 = {name: _rows(sql) for name, sql in TALLY_SQL.items()}

        _migrate(AFTER)
        run = Run.objects.defer("purpose", "session_key", "curriculum").get(pk=run_id)  # columns added after 0024
        current = _rows(f"SELECT l.source, l.decision, l.value FROM runs_rollout r, LATERAL runs_current_label_of(r.id) l"
                        f" WHERE r.run_id = {run_id}")
        assert [row[0] for row in current] == ["human"] * 8
        assert export_count(run.rollouts.all(), filters=ExportFilter(decision="approved")) == 7
        figures = selectors.agreement(run=run)
        assert (figures["approved"], figures["rejected"], figures["overridden"]) == (6, 1, 1)
        # v2 passes everything: it contradicts the approved failures and the rejected pass, not the 0.5 override.
        contradicted = {i for i, reward in enumerate(REWARDS[:6]) if reward == 0.0} | {6}
        assert figures["disagreements"] == len(contradicted)
        assert set(ReviewState.objects.filter(disagreement=True).values_list("rollout__seed", flat=True)) == contradicted
        # The proposal the humans judged is v1's again; v2's labels now name their verifier.
        assert sorted(ReviewState.objects.values_list("proposed_reward", flat=True)) == sorted(REWARDS)
        assert set(RewardLabel.objects.filter(rationale__startswith="re-verified").values_list("verifier_version_id",
                                                                                                 flat=True)) == {v2.pk}
        by_verifier = {row["version"]: row for row in figures["by_verifier"]}
        assert (by_verifier[v2.label]["labelled"], by_verifier[v2.label]["disagreements"]) == (8, len(contradicted))
        assert _rows(TALLY_SQL["labels"]) == as_of_0023["labels"]  # nothing deleted or changed but the new column

        _migrate(BEFORE)
        assert {name: _rows(sql) for name, sql in TALLY_SQL.items()} == as_of_0023
        assert _latest_is_human() == 0 and len(as_of_0023["labels"]) == 24
        assert not _rows("SELECT 1 FROM pg_proc WHERE proname = 'runs_current_label_of'")
    finally:
        _migrate(LATEST)
