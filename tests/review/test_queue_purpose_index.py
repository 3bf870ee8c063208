"""The queue's purpose filter at scale: each review state carries its run's purpose (kept by the review
state rule, filled by migration 0029), and the default queue (evaluations) reads a page of its own partial
index however many open states of other purposes (sessions, audits) the team holds before them."""
import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

from runs.models import LabelDecision, LabelSource, ReviewState, RewardLabel
from runs.review import selectors
from tests.conftest import login
from tests.review.conftest import bulk_run

SESSIONS, REVIEWED, EVALUATIONS, PAGE = 1500, 1000, 60, 20


def _plan_nodes(plan):
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def _most_rows_read(sql: str) -> tuple[int, str]:
    """The most rows any node of the query's executed plan handled (rows x loops, plus those it filtered out).
    Sequential scans off: a few thousand rows make one look cheap, 100k rollouts do not."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("RESET enable_seqscan")
        plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    most, where = 0, ""
    for node in _plan_nodes(plan):
        rows = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1)
        if rows > most:
            most, where = rows, f"{node['Node Type']} {node.get('Index Name', node.get('Relation Name', ''))}"
    return most, where


@pytest.mark.django_db
def test_review_states_carry_their_runs_purpose(team, owner, make_run):
    evaluation = make_run(rewards=[1.0], steps=0)
    session = make_run(rewards=[1.0, 0.0], steps=0, purpose="session")
    purposes = dict(ReviewState.objects.values_list("rollout__run_id", "purpose").distinct())
    assert purposes == {evaluation.pk: "evaluation", session.pk: "session"}
    page = login(owner).get(f"/t/{team.slug}/review/?purpose=session").content.decode()
    assert all(f"/review/{r.pk}/" in page for r in session.rollouts.all())
    assert f"/review/{evaluation.rollouts.get().pk}/" not in page


@pytest.mark.django_db
def test_the_evaluation_queue_reads_a_page_not_the_sessions_before_it(team, owner, reviewer, make_run):
    # Older, lower ids: a walk of the open states meets the sessions first; a walk from the evaluation runs
    # meets the evaluations reviewed long ago.
    make_run(rewards=[1.0] * SESSIONS, steps=0, purpose="session")
    reviewed = make_run(rewards=[1.0] * REVIEWED, steps=0)
    RewardLabel.objects.bulk_create(
        RewardLabel(team=team, rollout=r, source=LabelSource.HUMAN, value=1.0, decision=LabelDecision.APPROVED, reviewer=owner)
        for r in reviewed.rollouts.all())
    evaluation = make_run(rewards=[1.0] * EVALUATIONS, steps=0)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_reviewstate; ANALYZE runs_rollout; ANALYZE runs_run")
    selectors.queue_cursor(team=team, reviewer=reviewer)  # the cursor settled, as after a first visit
    with CaptureQueriesContext(connection) as captured:
        page = selectors.review_queue_page(team=team, reviewer=reviewer, limit=PAGE)
    assert [r.pk for r in page] == sorted(evaluation.rollouts.values_list("pk", flat=True))[:PAGE]
    reads = [query["sql"] for query in captured.captured_queries
             if query["sql"].lstrip("(").startswith("SELECT") and "runs_reviewstate" in query["sql"]]
    assert reads
    for sql in reads:
        most, where = _most_rows_read(sql)
        # The cursor's own move reads up to CURSOR_HOLES + 1 states; no read walks the sessions.
        assert most <= selectors.CURSOR_HOLES + 1 + PAGE, f"{most} rows at {where} for {sql}"


@pytest.mark.django_db(transaction=True)
def test_0031_fills_the_purpose_of_existing_states_from_their_runs(team, owner, make_run):
    session = make_run(rewards=[1.0, 0.0], steps=0, purpose="session")
    evaluation = make_run(rewards=[1.0], steps=0)
    try:
        MigrationExecutor(connection).migrate([("runs", "0030_transcript_scan")])
        MigrationExecutor(connection).migrate([("runs", "0031_review_state_purpose")])
        purposes = dict(ReviewState.objects.values_list("rollout__run_id", "purpose").distinct())
        assert purposes == {session.pk: "session", evaluation.pk: "evaluation"}
    finally:
        MigrationExecutor(connection).loader.build_graph()
        MigrationExecutor(connection).migrate([("runs", "0031_review_state_purpose")])
