"""A version with a large tasks.jsonl (issue 15: five versions with a 19 MB tasks file made every page
slow and the web process grow to 3.6 GB): pages and endpoints that show a version, or a run, rollout or
review item of it, read only what they show; the version's files and tasks stay in the database.

The spy counts the bytes PostgreSQL sends back for every query a request makes."""
import json

import pytest
from django.db import connection

from django.utils.html import escape

from environments.models import Draft, Environment, EnvironmentVersion
from runs import services
from runs.models import LabelDecision, LabelSource, RewardLabel, RolloutStatus
from tests.conftest import api_for, login
from tests.runs.rollout_factories import package_version, random_agent

ENV_PY = """
class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 1.0, True, False, {}
"""
TASKS = [{"id": f"t{i}", "difficulty": 1 + i % 3, "prompt": "p" * 100} for i in range(20_000)]  # ~2.5 MB
MOST_BYTES = 200_000  # what one request may read from the database: well under one copy of the tasks


class DatabaseBytes:
    """An execute wrapper that adds up the size of every cell of every result."""

    def __init__(self):
        self.bytes = 0

    def __call__(self, execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        found = context["cursor"].cursor.pgresult
        if found is not None:
            self.bytes += sum(len(found.get_value(row, col) or b"") for row in range(found.ntuples) for col in range(found.nfields))
        return result


def read_bytes(client, url, **kw) -> int:
    spy = DatabaseBytes()
    with connection.execute_wrapper(spy):
        response = client.get(url, **kw)
        if getattr(response, "streaming", False):
            b"".join(response.streaming_content)
    assert response.status_code == 200, (url, response.status_code)
    return spy.bytes


@pytest.fixture
def large(team, owner, reviewer):
    version = package_version(team, owner, "big", ENV_PY, tasks=TASKS)
    assert len(version.files["tasks.jsonl"]) > 2_000_000
    for _ in range(2):  # two, for the comparison page
        run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                                  task_ids=["t1", "t2"], seeds=[0], enqueue=False)
    rollouts = list(run.rollouts.order_by("id"))
    for rollout in rollouts:
        rollout.status, rollout.total_reward, rollout.verifier_reward = RolloutStatus.SUCCEEDED, 1.0, 1.0
        rollout.save()
        RewardLabel.objects.create(team=team, rollout=rollout, source=LabelSource.VERIFIER, value=1.0,
                                   decision=LabelDecision.PROPOSED)
    browser = Environment.objects.create(team=team, slug="big-web", name="big-web", kind="browser", created_by=owner)
    Draft.objects.create(environment=browser, files={})
    EnvironmentVersion.objects.create(
        environment=browser, number=1, files={"environment.toml": 'kind = "browser"', "tasks.jsonl": version.files["tasks.jsonl"]},
        manifest={"kind": "browser", "entrypoint": "env:Env"}, tasks=TASKS, content_hash="0" * 64, author=owner, message="m")
    return version, run, rollouts


def test_pages_of_a_large_version_read_only_what_they_show(team, owner, large):
    version, run, rollouts = large
    page, t = login(owner), f"/t/{team.slug}"
    urls = [
        f"{t}/environments/", f"{t}/environments/big/versions/", f"{t}/environments/big/versions/1/",
        f"{t}/quality/versions/big/1/card/",
        f"{t}/runs/new/?version=big@1", f"{t}/runs/", f"{t}/runs/{run.pk}/", f"{t}/rollouts/{rollouts[0].pk}/",
        f"{t}/runs/compare/?runs={run.pk - 1},{run.pk}", f"{t}/agents/", f"{t}/agents/{run.agent_id}/",
        f"{t}/review/", f"{t}/review/{rollouts[0].pk}/", f"{t}/runs/{run.pk}/export.jsonl?decision=all", f"{t}/play/?version=big-web@1",
    ]
    read = {url: read_bytes(page, url) for url in urls}
    read[f"{t}/review/next/"] = read_bytes(page, f"{t}/review/next/", follow=True)
    assert {url: n for url, n in read.items() if n > MOST_BYTES} == {}


def test_api_of_a_large_version_reads_only_what_it_answers(team, owner, large):
    version, run, rollouts = large
    api = api_for(owner, team)
    urls = [
        "/environments", "/environments/big", "/environments/big/versions", "/environments/big/versions/1/files/env.py",
        "/environments/big/versions/1/agreement", "/runs", f"/runs/{run.pk}", f"/runs/{run.pk}/rollouts",
        f"/runs/{run.pk}/agreement", f"/rollouts/{rollouts[0].pk}", f"/rollouts/{rollouts[0].pk}/steps",
        f"/rollouts/{rollouts[0].pk}/labels", "/review/queue", "/review/next?count=true",
        f"/runs/{run.pk}/export?decision=all",
    ]
    read = {url: read_bytes(api.client, f"/api/v1{url}", headers=api.headers) for url in urls}
    assert {url: n for url, n in read.items() if n > MOST_BYTES} == {}


def test_the_version_page_shows_the_head_of_a_large_file_and_the_task_count(team, owner, large, monkeypatch):
    monkeypatch.setattr("environments.views.FILE_SHOWN_CHARS", 1000)
    html = login(owner).get(f"/t/{team.slug}/environments/big/versions/1/?file=tasks.jsonl").content.decode()
    assert f"showing the first 1000 of {len(large[0].files['tasks.jsonl'])} characters" in html
    assert "<dd>20000</dd>" in html
    assert escape(json.dumps(TASKS[0])) in html and escape(json.dumps(TASKS[-1])) not in html


def test_the_play_page_takes_a_typed_task_id_when_a_version_has_many_tasks(team, owner, large):
    html = login(owner).get(f"/t/{team.slug}/play/?version=big-web@1").content.decode()
    assert 'list="task-ids"' in html and "20000 tasks" in html
    assert '<option value="t499">' in html and '<option value="t500">' not in html
