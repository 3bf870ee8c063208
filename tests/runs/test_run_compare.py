"""Comparing runs: per-task success rate and mean return side by side, deltas from the first run, the
same numbers on the page and in the API; bad selections say why."""
import re

import pytest

from runs import services
from runs.models import Rollout
from tests.conftest import login
from tests.runs.rollout_factories import package_version, random_agent

ENV_PY = """
class Env:
    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 0.0, True, False, {}
"""


@pytest.fixture
def two_runs(team, owner):
    version = package_version(team, owner, "cmp", ENV_PY, tasks=[{"id": "a", "difficulty": 1}, {"id": "b", "difficulty": 2}])
    agent = random_agent(team, owner)
    runs = [services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0, 1], enqueue=False) for _ in range(2)]
    outcomes = [  # (task, seed) -> (status, return) for the first and the second run
        {("a", 0): ("succeeded", 1.0), ("a", 1): ("failed", 0.0), ("b", 0): ("failed", 0.0), ("b", 1): ("errored", 0.0)},
        {("a", 0): ("succeeded", 1.0), ("a", 1): ("succeeded", 1.0), ("b", 0): ("succeeded", 0.5), ("b", 1): ("failed", 0.0)},
    ]
    for run, outcome in zip(runs, outcomes):
        for rollout in run.rollouts.all():
            status, ret = outcome[(rollout.task_id, rollout.seed)]
            Rollout.objects.filter(pk=rollout.pk).update(status=status, total_reward=ret)
    return runs


def test_the_api_compares_runs_task_by_task_with_deltas(two_runs, owner_api):
    first, second = two_runs
    body = owner_api.get("/runs/compare", {"runs": f"{first.pk},{second.pk}"}).json()
    assert body["runs"] == [first.pk, second.pk]
    a, b = body["tasks"]
    assert a["task_id"] == "a" and [c["success_rate"] for c in a["cells"]] == [0.5, 1.0]
    assert a["cells"][1]["success_delta"] == 0.5 and a["cells"][0]["success_delta"] is None
    assert b["cells"][0]["return"] == {"mean": 0.0, "count": 1, "missing": 1}
    assert b["cells"][1]["return_delta"] == 0.25
    assert body["overall"][0]["success_rate"] == 0.25 and body["overall"][1]["success_delta"] == 0.5


def test_the_page_shows_the_same_numbers(two_runs, owner, team):
    first, second = two_runs
    page = login(owner).get(f"/t/{team.slug}/runs/compare/", {"run": [first.pk, second.pk]}).content.decode()
    assert 'data-task="a"' in page and "+50 pts" in page and "+0.250" in page and "25%" in page


@pytest.mark.parametrize("text,message", [("7", "from 2 to 6"), ("x,1", "is not a run number"), ("999998,999999", "No run")])
def test_bad_selections_say_why(two_runs, owner, owner_api, team, text, message):
    r = owner_api.get("/runs/compare", {"runs": text})
    assert r.status_code == 400 and r.json()["field"] == "runs" and message in r.json()["detail"]
    assert message in login(owner).get(f"/t/{team.slug}/runs/compare/", {"runs": text}).content.decode()


def test_another_teams_runs_cannot_be_compared(two_runs, outsider_api):
    r = outsider_api.get("/runs/compare", {"runs": ",".join(str(run.pk) for run in two_runs)})
    assert r.status_code == 400 and "No run" in r.json()["detail"]


def test_run_table_filters_and_sorts(two_runs, owner, team):
    second = two_runs[1]
    page = login(owner).get(f"/t/{team.slug}/runs/{second.pk}/", {"status": "succeeded", "order": "-return"}).content.decode()
    rows = re.findall(r'<tr id="rollout-\d+" data-status="(\w+)">(.*?)</tr>', page, re.S)
    assert [status for status, _ in rows] == ["succeeded"] * 3
    assert "0.500" in rows[-1][1] and "1.000" in rows[0][1]
