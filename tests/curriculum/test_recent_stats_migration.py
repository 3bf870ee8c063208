"""Migration 0028 (statistics that forget) on statistics kept as of 0027: each row's recent counts are its
all-time ones as decayed counts of evenly spread rollouts (at most the window), so `recent` samples
sensibly from the first day."""
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from runs.curriculum.stats import RECENT_DECAY, RECENT_WINDOW
from tests.curriculum.test_task_stats_and_samplers import ENV_PY, TASKS
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = "0027_task_stats", "0028_task_stat_recent"
LATEST = max(name for app, name in MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes() if app == "runs")


def _migrate(target: str):
    MigrationExecutor(connection).migrate([("runs", target)])
    return MigrationExecutor(connection).loader.project_state([("runs", target)]).apps


def test_0028_fills_recent_counts_from_the_all_time_ones(team, owner):
    version = package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    try:
        apps = _migrate(BEFORE)
        TaskStat = apps.get_model("runs", "TaskStat")
        for task_id, rollouts, successes in (("easy", 1, 1), ("coin", 10, 4), ("never", 1000, 0)):
            TaskStat.objects.create(team_id=team.pk, environment_version_id=version.pk, task_id=task_id, agent_name="random",
                                    rollouts=rollouts, successes=successes)
        apps = _migrate(AFTER)
        rows = {row["task_id"]: row for row in apps.get_model("runs", "TaskStat").objects.values()}
        window = lambda n: RECENT_WINDOW * (1 - RECENT_DECAY**n)  # noqa: E731
        assert rows["easy"]["recent_rollouts"] == pytest.approx(1.0) and rows["easy"]["recent_successes"] == pytest.approx(1.0)
        assert rows["coin"]["recent_rollouts"] == pytest.approx(window(10)) and window(10) < 10
        assert rows["coin"]["recent_successes"] == pytest.approx(0.4 * window(10))
        assert rows["never"]["recent_rollouts"] == pytest.approx(RECENT_WINDOW) and rows["never"]["recent_successes"] == 0
    finally:
        _migrate(LATEST)
