"""One definition of every run figure: the selector's numbers on a run mixing every status, and the
run page, the run's websocket and the API showing exactly those numbers."""
import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command

from runs import services
from runs.figures import run_figures
from runs.models import Rollout, RolloutStatus
from tests.conftest import login
from tests.runs.rollout_factories import package_version, random_agent
from tests.runs.test_streaming import communicator, own_channel_layer, session_cookie  # noqa: F401 - fixture

ENV_PY = """
class Env:
    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 0.0, True, False, {}
"""
# (status, return, verifier reward, steps): every status, twice over two difficulties.
MIX = [
    (RolloutStatus.SUCCEEDED, 1.0, 1.0, 4),
    (RolloutStatus.FAILED, 0.5, 0.0, 6),
    (RolloutStatus.FAILED, 0.0, None, 2),  # verify() gave no reward: a return, no verifier reward
    (RolloutStatus.ERRORED, 0.3, None, 3),  # crashed mid-episode: its partial return is no reward
    (RolloutStatus.TIMED_OUT, 0.0, None, 5),
    (RolloutStatus.CANCELLED, 0.0, None, 1),
    (RolloutStatus.QUEUED, 0.0, None, 0),
    (RolloutStatus.RUNNING, 0.2, None, 2),
]


def mixed_run(team, owner):
    version = package_version(
        team, owner, "mixed", ENV_PY, tasks=[{"id": "easy", "difficulty": 1}, {"id": "hard", "difficulty": 2}]
    )
    run = services.run_create(
        team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=list(range(len(MIX))), enqueue=False
    )
    for task_id in ("easy", "hard"):
        for rollout, (status, ret, verifier, steps) in zip(run.rollouts.filter(task_id=task_id).order_by("seed"), MIX):
            Rollout.objects.filter(pk=rollout.pk).update(
                status=status, total_reward=ret, verifier_reward=verifier, step_count=steps,
                error="boom" if status == RolloutStatus.ERRORED else "",
            )
    return run


@pytest.fixture
def run(team, owner):
    return mixed_run(team, owner)


def test_figures_follow_the_issue_definitions_on_a_run_mixing_every_status(run):
    f = run_figures(run)
    assert f["total"] == 16 and f["done"] == 10 and f["cancelled"] == 2 and f["pending"] == 4
    # 2 succeeded of 10 done (failed, errored and timed out count as not succeeded; cancelled not at all).
    assert f["succeeded"] == 2 and f["success_rate"] == 0.2
    # return over the 6 rollouts whose episode ran to its end; the errored one's partial 0.3 is not a return
    assert f["return"] == {"mean": round((1.0 + 0.5 + 0.0) * 2 / 6, 4), "count": 6, "missing": 4}
    assert f["verifier"] == {"mean": 0.5, "count": 4, "missing": 6}
    assert f["mean_steps"] == (4 + 6 + 2 + 3 + 5) * 2 / 10
    assert set(f["by_difficulty"]) == {"1", "2"}
    assert f["by_difficulty"]["1"]["done"] == 5 and f["by_difficulty"]["1"]["total"] == 8
    assert f["by_difficulty"]["2"]["success_rate"] == 0.2
    assert f["by_task"]["hard"]["cancelled"] == 1


def test_one_of_each_judged_or_broken_status_is_25_percent(team, owner):
    version = package_version(team, owner, "quarter", ENV_PY)
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1, 2, 3], enqueue=False)
    for rollout, status in zip(run.rollouts.order_by("seed"), ["succeeded", "failed", "errored", "timed_out"]):
        Rollout.objects.filter(pk=rollout.pk).update(status=status, verifier_reward=1.0 if status == "succeeded" else None)
    assert run_figures(run)["success_rate"] == 0.25


def test_a_cancelled_run_is_not_all_done(team, owner):
    version = package_version(team, owner, "cancelled", ENV_PY)
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=list(range(10)), enqueue=False)
    Rollout.objects.filter(pk=run.rollouts.order_by("id")[0].pk).update(status="succeeded", verifier_reward=1.0, total_reward=1.0)
    services.run_cancel(run=run, actor=owner)
    f = run_figures(run)
    assert (f["done"], f["cancelled"], f["pending"], f["total"]) == (1, 9, 0, 10)
    assert f["success_rate"] == 1.0 and f["mean_steps"] == 0


def test_figures_are_a_fixed_number_of_queries(run, django_assert_max_num_queries):
    with django_assert_max_num_queries(3):
        run_figures(run)


def figures_from_rows(run) -> dict:
    """The figures recomputed from the rollout rows themselves, as the module's definitions say."""
    done = [r for r in run.rollouts.all() if r.status in ("succeeded", "failed", "errored", "timed_out")]
    ran = [r for r in done if r.status in ("succeeded", "failed")]
    rated = [r for r in done if r.verifier_reward is not None]
    return {
        "total": run.rollouts.count(), "done": len(done),
        "counts": {s: run.rollouts.filter(status=s).count() for s in RolloutStatus.values},
        "return": round(sum(r.total_reward for r in ran) / len(ran), 4) if ran else None,
        "verifier": round(sum(r.verifier_reward for r in rated) / len(rated), 4) if rated else None,
        "steps": round(sum(r.step_count for r in done) / len(done), 2) if done else None,
    }


def test_the_kept_tallies_follow_every_change_of_the_rollouts(run):
    """The page reads tallies the database keeps; after inserts, status changes, reward changes of done
    rollouts, a move to another task and deletes they still equal the rows."""
    def shown(f):
        return {"total": f["total"], "done": f["done"], "counts": f["counts"], "return": f["return"]["mean"],
                "verifier": f["verifier"]["mean"], "steps": f["mean_steps"]}

    assert shown(run_figures(run)) == figures_from_rows(run)
    running = run.rollouts.filter(status=RolloutStatus.RUNNING)
    running.update(step_count=40)  # a running rollout's steps count for nothing yet
    assert shown(run_figures(run)) == figures_from_rows(run)
    running.update(status=RolloutStatus.SUCCEEDED, total_reward=2.5, verifier_reward=1.0)
    run.rollouts.filter(status=RolloutStatus.FAILED).update(total_reward=-1.0, step_count=7)
    Rollout.objects.filter(pk=run.rollouts.filter(task_id="easy").first().pk).update(task_id="hard")
    run.rollouts.filter(status=RolloutStatus.CANCELLED).delete()
    assert shown(run_figures(run)) == figures_from_rows(run)
    assert set(run_figures(run)["by_task"]) == {"easy", "hard"}
    run.rollouts.filter(task_id="easy").delete()
    assert set(run_figures(run)["by_task"]) == {"hard"}


def stat(html: str, key: str) -> str:
    match = re.search(rf'data-k="{key}">([^<]*)<', html)
    assert match, f"no {key} on the page"
    return match.group(1).strip()


@pytest.mark.django_db(transaction=True)
def test_page_live_stream_and_api_show_the_same_figures(team, owner, owner_api):
    run = mixed_run(team, owner)
    api = owner_api.get(f"/runs/{run.pk}").json()["summary"]
    page = login(owner).get(f"/t/{team.slug}/runs/{run.pk}/").content.decode()

    cookie = session_cookie(owner)

    async def opening():
        comm = communicator(f"/ws/runs/{run.pk}/", cookie)
        assert (await comm.connect())[0]
        message = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return message

    live = async_to_sync(opening)()
    assert live["type"] == "run"
    assert live["summary"] == api == json.loads(json.dumps(run_figures(run)))
    # The live summary carries its parts rendered by the templates the page renders: the same bytes.
    for element, html in live["html"].items():
        assert html.strip() in page, f"the live {element} differs from the page's"
    assert stat(page, "progress") == "10/16"
    assert stat(page, "success") == "20%"
    assert stat(page, "return") == f"{api['return']['mean']:.3f}" and "4 without" in page
    assert stat(page, "verifier") == "0.500" and "6 without" in page


def test_cli_wait_summary_is_the_same_figures(team, owner, capsys):
    version = package_version(team, owner, "cli-figures", ENV_PY)
    call_command("run_rollouts", "cli-figures@1", "--team", team.slug, "--agent", "random", "--tasks", "all", "--seeds", "0-1", "--inline")
    out = capsys.readouterr().out
    run_id, _, summary = out.partition("\n")
    run = version.runs.get(pk=int(run_id))
    assert json.loads(summary) == json.loads(json.dumps(run_figures(run)))
