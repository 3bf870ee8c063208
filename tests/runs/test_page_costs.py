"""A page or list endpoint costs its page, not the data behind it: the same number of queries with 10
rollouts (or steps, or labels) behind it as with 1,000, and the run page's chart data stays bounded."""
import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.figures import POINTS_SHOWN
from runs.models import LabelDecision, LabelSource, RewardLabel, Rollout, RolloutStatus, Step
from runs.review import selectors as review_selectors
from runs import services
from tests.conftest import api_for, login
from tests.runs.rollout_factories import package_version, random_agent

ENV_PY = """
class Env:
    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 1.0, True, False, {}
"""


def grown_run(team, owner, version, agent, n):
    """A run of n done rollouts over three tasks, each with a verifier proposal and a human approval, and
    a rollout of n steps."""
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0], enqueue=False)
    run.rollouts.all().delete()  # the run's own queued rollouts: replaced by n done ones
    rollouts = Rollout.objects.bulk_create(
        Rollout(team=team, run=run, task_id=f"t{i % 3}", seed=i, status=RolloutStatus.SUCCEEDED if i % 2 else RolloutStatus.FAILED,
                total_reward=float(i % 5), verifier_reward=float(i % 2), step_count=n)
        for i in range(n)
    )
    RewardLabel.objects.bulk_create(
        RewardLabel(team=team, rollout=r, source=LabelSource.VERIFIER, value=r.verifier_reward, decision=LabelDecision.PROPOSED)
        for r in rollouts)
    RewardLabel.objects.bulk_create(
        RewardLabel(team=team, rollout=r, source=LabelSource.HUMAN, value=r.verifier_reward, decision=LabelDecision.APPROVED,
                    reviewer=owner)
        for r in rollouts[: n // 2])
    Step.objects.bulk_create(Step(rollout=rollouts[0], index=i, action=i, observation=i) for i in range(n))
    return run, rollouts[0]


def queries(client, url, **kw) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **kw)
    assert response.status_code == 200, url
    return len(captured.captured_queries), response


@pytest.fixture
def costs(team, owner):
    tasks = [{"id": f"t{i}", "difficulty": i + 1} for i in range(3)]
    version = package_version(team, owner, "costs", ENV_PY, tasks=tasks)
    agent = random_agent(team, owner)
    page, api = login(owner), api_for(owner, team)
    base_run, _ = grown_run(team, owner, version, agent, 2)  # the compare page compares it with each run measured

    def measure(n):
        run, rollout = grown_run(team, owner, version, agent, n)
        t, v = f"/t/{team.slug}", f"/t/{team.slug}/environments/costs"
        pages = {
            "run page": (page, f"{t}/runs/{run.pk}/"),
            "run page, filtered": (page, f"{t}/runs/{run.pk}/?status=succeeded&task=t1&order=-return"),
            "runs list page": (page, f"{t}/runs/"),
            "runs list page, filtered": (page, f"{t}/runs/?purpose=all&agent={agent.name}&version=costs@1&status=queued"
                                               f"&created_from=2020-01-01&q=costs"),
            "compare page": (page, f"{t}/runs/compare/?runs={base_run.pk},{run.pk}"),
            "rollout page": (page, f"{t}/rollouts/{rollout.pk}/"),
            "replay window": (page, f"{t}/rollouts/{rollout.pk}/steps.json?offset={max(0, n - 5)}"),
            "agents page": (page, f"{t}/agents/"),
            "agent page": (page, f"{t}/agents/{agent.pk}/"),
            "environments list page": (page, f"{t}/environments/"),
            "versions page": (page, f"{v}/versions/"),
            "version page": (page, f"{v}/versions/1/"),
            "run form": (page, f"{t}/runs/new/?version=costs@1"),
            "review queue page": (page, f"{t}/review/"),
            "review queue page, filtered": (page, f"{t}/review/?run={run.pk}&outcome=pass"),
            "review queue page, by purpose": (page, f"{t}/review/?purpose=session"),
            "review item page": (page, f"{t}/review/{rollout.pk}/"),
            "next review item": (page, f"{t}/review/next/"),
        }
        endpoints = {
            "run API": f"/api/v1/runs/{run.pk}",
            "runs API": "/api/v1/runs",
            "runs API, next page": f"/api/v1/runs?before={run.pk}&limit=5",
            "runs API, filtered": f"/api/v1/runs?purpose=evaluation&agent={agent.pk}&version=costs&q={run.pk}",
            "run rollouts API": f"/api/v1/runs/{run.pk}/rollouts",
            "rollout API": f"/api/v1/rollouts/{rollout.pk}",
            "steps API last page": f"/api/v1/rollouts/{rollout.pk}/steps?offset={max(0, n - 5)}",
            "labels API": f"/api/v1/rollouts/{rollout.pk}/labels",
            "agreement API": f"/api/v1/runs/{run.pk}/agreement",
            "version agreement API": "/api/v1/environments/costs/versions/1/agreement",
            "environments API": "/api/v1/environments",
            "versions API": "/api/v1/environments/costs/versions",
            "review queue API": "/api/v1/review/queue",
            "review queue API, next page": f"/api/v1/review/queue?after={rollout.pk}&limit=5",
            "next review item API": "/api/v1/review/next?count=true",
        }
        measured = {name: queries(client, url, follow=name == "next review item") for name, (client, url) in pages.items()}
        measured.update({name: queries(api.client, url, headers=api.headers) for name, url in endpoints.items()})
        return measured, run

    return measure


def test_pages_cost_the_same_number_of_queries_at_10_and_1000_rollouts(costs):
    costs(3)  # warms what a first request caches (the token's last use, content types)
    small, _ = costs(10)
    large, run = costs(1000)
    assert {name: n for name, (n, _) in large.items()} == {name: n for name, (n, _) in small.items()}


def test_the_run_chart_shows_the_latest_points_numbered_among_all(team, owner, costs, monkeypatch):
    monkeypatch.setattr("runs.figures.POINTS_SHOWN", 20)
    pages, run = costs(60)
    html = pages["run page"][1].content.decode()
    packed = json.loads(re.search(r'<script id="run-points" type="application/json">(.*?)</script>', html, re.S).group(1))
    done = run.rollouts.filter(status__in=["succeeded", "failed"]).order_by("finished_at", "id")
    assert packed["id"] == [r.pk for r in done][-20:]
    assert packed["n"] == 41 and len(packed["status"]) == len(packed["seed"]) == 20
    assert POINTS_SHOWN >= 100  # the real cap leaves a chart worth reading


def test_agreement_tallies_equal_a_recount_after_decisions_change(team, owner, reviewer, costs):
    _, run = costs(12)
    rollouts = list(run.rollouts.order_by("id"))
    # The reviewer disagrees on some, the owner changes their mind on one: latest decisions count.
    for r in rollouts[:4]:
        RewardLabel.objects.create(team=team, rollout=r, source=LabelSource.HUMAN, value=1.0 - r.verifier_reward,
                                   decision=LabelDecision.OVERRIDDEN, reviewer=reviewer)
    RewardLabel.objects.create(team=team, rollout=rollouts[0], source=LabelSource.HUMAN, value=None,
                               decision=LabelDecision.REJECTED, reviewer=owner)
    figures = review_selectors.agreement(run=run)
    assert figures["rollouts"] == 12 and figures["rollouts_reviewed"] == 6
    assert figures["human_decisions"] == 6 + 4 + 1
    assert (figures["approved"], figures["rejected"], figures["overridden"]) == (6, 1, 4)
    # Rollouts 0-3 have two raters: the reviewer's override says the opposite of the verifier; the owner
    # approved 1-3 (agrees with the verifier) and rejected 0 (disagrees): so 0's raters agree, 1-3's don't.
    assert figures["human_human"] == {"rollouts": 4, "pairs": 4, "agreement_rate": 0.25}
    confusion = figures["verifier_human"]["confusion"]
    assert sum(confusion.values()) == figures["verifier_human"]["compared"] == 6 + 4
    assert figures["verifier_human"]["agreement_rate"] == round((6 - 1) / 10, 4)


def test_keyset_pages_of_runs_and_the_review_queue_list_every_item_once(team, owner, costs):
    costs(4)
    costs(5)
    api = api_for(owner, team)

    def walk(url, key, cursor):
        seen, last = [], None
        while True:
            page = api.client.get(url + (f"&{cursor}={last}" if last is not None else ""), headers=api.headers).json()
            items = page if isinstance(page, list) else page["items"]
            if not items:
                return seen
            seen += [item[key] for item in items]
            last = items[-1][key]

    runs = walk("/api/v1/runs?limit=2", "id", "before")
    assert runs == [run["id"] for run in api.client.get("/api/v1/runs?limit=200", headers=api.headers).json()]
    assert len(runs) == len(set(runs)) == 3  # the fixture's base run and the two measured
    queue = walk("/api/v1/review/queue?limit=3", "id", "after")
    everything = api.client.get("/api/v1/review/queue?limit=500", headers=api.headers).json()
    assert queue == [item["id"] for item in everything["items"]] and len(queue) == everything["count"] > 3


def run_of(team, owner, version, agent, n, *, tasks=3):
    """A run of n done rollouts over `tasks` tasks (t0, t1, ...)."""
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0], enqueue=False)
    run.rollouts.all().delete()
    Rollout.objects.bulk_create(
        Rollout(team=team, run=run, task_id=f"t{i % tasks}", seed=i, step_count=1 + i % 4, total_reward=float(i % 5),
                status=RolloutStatus.SUCCEEDED if i % 2 else RolloutStatus.FAILED, verifier_reward=float(i % 2))
        for i in range(n))
    return run


def row_ids(html: str) -> list[int]:
    tbody = html[html.index('<tbody id="rollout-rows">'):]
    return [int(i) for i in re.findall(r'<tr id="rollout-(\d+)"', tbody[:tbody.index("</tbody>")])]


def embedded(html: str, element: str):
    return json.loads(re.search(rf'<script id="{element}" type="application/json">(.*?)</script>', html, re.S).group(1))


def test_the_run_page_shows_one_page_of_rollouts_whatever_the_run_holds(team, owner):
    from runs.views import ROLLOUTS_PER_PAGE

    version = package_version(team, owner, "paged", ENV_PY, tasks=[{"id": f"t{i}", "difficulty": i + 1} for i in range(3)])
    agent, page = random_agent(team, owner), login(owner)
    url = f"/t/{team.slug}/runs/{{}}/"
    queries(page, url.format(run_of(team, owner, version, agent, 3).pk))  # warms what a first request caches
    small, large = run_of(team, owner, version, agent, 20), run_of(team, owner, version, agent, 400)
    small_n, small_page = queries(page, url.format(small.pk))
    large_n, large_page = queries(page, url.format(large.pk))
    assert small_n == large_n  # a user waits as long for the page of 400 rollouts as for the page of 20
    ids = list(large.rollouts.order_by("id").values_list("id", flat=True))
    assert len(row_ids(small_page.content.decode())) == 20
    html = large_page.content.decode()
    assert row_ids(html) == ids[:ROLLOUTS_PER_PAGE] and ROLLOUTS_PER_PAGE <= 50
    assert f"Rollouts 1–{ROLLOUTS_PER_PAGE} of 400" in html and 'rel="next"' in html
    last = 400 // ROLLOUTS_PER_PAGE
    last_html = page.get(f"{url.format(large.pk)}?page={last}").content.decode()
    assert row_ids(last_html) == ids[-ROLLOUTS_PER_PAGE:] and 'rel="next"' not in last_html
    # Every rollout is on exactly one page, and a filtered table pages the same way.
    seen = [i for n in range(1, last + 1) for i in row_ids(page.get(f"{url.format(large.pk)}?page={n}").content.decode())]
    assert seen == ids
    failed = page.get(f"{url.format(large.pk)}?status=failed&order=-return").content.decode()
    assert f"of 200 · page 1 of {200 // ROLLOUTS_PER_PAGE}" in failed and "status=failed" in failed
    # The charts' data has the same shape at 20 rollouts as at 400: only the numbers in it differ.
    def shape(value):
        if isinstance(value, dict):
            return {key: shape(v) for key, v in value.items()}
        return [shape(v) for v in value] if isinstance(value, list) else type(value).__name__

    assert shape(embedded(html, "run-analytics")) == shape(embedded(small_page.content.decode(), "run-analytics"))


def test_a_run_of_many_tasks_charts_a_bounded_few_and_filters_by_a_typed_task(team, owner):
    from runs.figures import TASKS_CHARTED, run_figures, run_summary_message

    version = package_version(team, owner, "wide", ENV_PY, tasks=[{"id": f"t{i}"} for i in range(150)])
    agent, page = random_agent(team, owner), login(owner)
    run = run_of(team, owner, version, agent, 300, tasks=150)
    html = page.get(f"/t/{team.slug}/runs/{run.pk}/").content.decode()
    analytics = embedded(html, "run-analytics")
    assert analytics["tasks"] == 150 and list(analytics["by_task"]) == sorted(run_figures(run)["by_task"])[:TASKS_CHARTED]
    assert analytics["by_task"]["t0"] == {"success_rate": 0.0, "succeeded": 0, "done": 2}  # seeds 0 and 150: both even
    assert f"the first {TASKS_CHARTED} of 150 tasks by id" in html
    assert '<select name="task">' not in html and '<input name="task"' in html
    # What a live viewer is sent draws the same charts as the page embeds.
    assert run_summary_message(run)["analytics"] == analytics
    typed = page.get(f"/t/{team.slug}/runs/{run.pk}/?task=t7").content.decode()
    assert sorted(row_ids(typed)) == sorted(run.rollouts.filter(task_id="t7").values_list("id", flat=True))
    assert 'value="t7"' in typed
