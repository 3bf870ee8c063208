"""What a rollout costs the worker's database: a handful of statements whatever its run's size, none of
which locks the run row (issue 16: 16-29 round trips and two run-row locks per rollout before)."""
import pytest
from django.db import connection

from runs import services
from runs.models import RolloutStatus, RunStatus
from runs.tasks import execute_rollout
from tests.runs.rollout_factories import package_version, random_agent

pytestmark = pytest.mark.django_db(transaction=True)

ENV_PY = """
class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        self.n = 0
        return {"n": 0}

    def step(self, action):
        self.n += 1
        return {"n": self.n}, 1.0, self.n >= 5, False, {}

    def verify(self):
        return 1.0, "five"
"""


def test_a_rollout_costs_a_few_statements_and_never_locks_its_run(team, owner):
    version = package_version(team, owner, "cheap", ENV_PY)
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1, 2],
                              enqueue=False)
    first, middle, last = run.rollouts.order_by("id")
    execute_rollout(first.pk)  # the run starts
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        execute_rollout(middle.pk)
    middle.refresh_from_db()
    assert middle.status == RolloutStatus.SUCCEEDED and middle.step_count == 5
    assert middle.initial_observation == {"n": 0}  # written by the first flush
    # claim, load, flush (one more if the 0.2 s flush interval passed), finish with its label, run check
    assert len(statements) <= 6, statements
    assert not [sql for sql in statements if "FOR UPDATE" in sql.upper()]
    assert not [sql for sql in statements if "BEGIN" in sql.upper() or "SAVEPOINT" in sql.upper()]
    execute_rollout(last.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED
    assert middle.labels.get().value == 1.0
