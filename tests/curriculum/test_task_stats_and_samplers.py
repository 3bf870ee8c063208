"""Task statistics per agent, samplers and the signal figure, on a package whose tasks are known to be easy,
learnable (a coin) and impossible for the random agent, with one task held out for eval."""
import json

import numpy as np
import pytest

from runs import figures
from runs import services as run_services
from runs.curriculum.stats import posterior
from runs.models import RunPurpose
from tests.conftest import login
from tests.processes import celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version, play_run, random_agent, scripted_agent

pytestmark = pytest.mark.django_db(transaction=True)

ENV_PY = """
class Env:
    action_space = {"type": "discrete", "n": 10}

    def reset(self, task, seed):
        self.task, self.action = task["id"], None
        return {"task": self.task}

    def step(self, action):
        self.action = int(action)
        return {"done": True}, 0.0, True, False, {}

    def verify(self):
        passed = {"easy": True, "coin": self.action < 5, "never": False, "held-out": self.action < 5}[self.task]
        return (1.0, "passed") if passed else (0.0, "failed")
"""
TASKS = [{"id": "easy", "difficulty": 1}, {"id": "coin", "difficulty": 2}, {"id": "never", "difficulty": 3},
         {"id": "held-out", "difficulty": 2, "split": "eval"}]
SEEDS = list(range(32))
URL = "/environments/bands/versions/1/tasks"


@pytest.fixture
def measured(team, owner):
    version = package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    run = run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                                  task_ids=["easy", "coin", "never"], seeds=SEEDS)
    play_run(run)
    return version, run


def test_bands_samplers_and_signal_follow_what_the_random_agent_can_do(owner_api, measured, team, owner):
    """One measured package (96 rollouts) serves every figure: rollouts are what this costs."""
    version, run = measured
    body = owner_api.get(f"{URL}/stats", {"agent": "random"}).json()
    by_task = {t["task_id"]: t for t in body["tasks"]}
    assert [t["task_id"] for t in body["tasks"]] == ["easy", "coin", "never", "held-out"]
    assert by_task["easy"]["rollouts"] == 32 and by_task["easy"]["pass_rate"] == 1.0
    assert by_task["easy"]["band"] == "too_easy" and by_task["never"]["band"] == "too_hard"
    assert by_task["coin"]["band"] == "learnable" and 0.2 < by_task["coin"]["pass_rate"] < 0.8
    low, high = by_task["coin"]["interval"]
    assert low < by_task["coin"]["pass_rate"] < high
    assert by_task["held-out"]["band"] == "unknown" and by_task["held-out"]["rollouts"] == 0
    assert by_task["easy"]["mean_steps"] == 1.0 and by_task["easy"]["difficulty"] == 1
    # The version page's task map says the same, per task.
    page = login(owner).get("/t/alpha/curriculum/versions/bands/1/tasks/").content.decode()
    for task_id, band in (("easy", "too_easy"), ("coin", "learnable"), ("never", "too_hard"), ("held-out", "unknown")):
        assert f'data-task="{task_id}" data-band="{band}"' in page
    assert "curriculum/versions/bands/1/tasks/" in login(owner).get("/t/alpha/environments/bands/versions/1/").content.decode()


    def sample(**body):
        response = owner_api.post(f"{URL}/sample", json.dumps({"agent": "random", "k": 400, "seed": 3, **body}))
        assert response.status_code == 200, response.content
        return response.json()["tasks"]

    learnable = sample(strategy="learnable")
    assert learnable == sample(strategy="learnable")  # deterministic given seed and statistics
    assert learnable.count("coin") > 0.9 * len(learnable)
    assert "held-out" not in learnable and "held-out" not in sample(strategy="uniform")
    uniform = sample(strategy="uniform")
    assert all(uniform.count(t) > 80 for t in ("easy", "coin", "never"))
    # The ladder has passed level 1 (easy at 100 %) and climbs to level 2, where the coin is.
    assert set(sample(strategy="ladder")) == {"coin"}


    # The run's signal: three groups (one per task); easy (all pass) and never (all fail) have zero variance.
    signal = figures.run_figures(run)["signal"]
    assert signal == {"groups": 3, "zero_variance_groups": 2, "share_with_signal": round(1 / 3, 4)}
    assert owner_api.get(f"/runs/{run.pk}").json()["summary"]["signal"] == signal

    # Audits do not count; another agent keeps statistics of its own.
    solver = scripted_agent(team, owner, "def act(observation, info):\n    return 0\n", name="solver")
    audit_like = run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                                         task_ids=["never"], seeds=[100, 101])
    audit_like.purpose = RunPurpose.AUDIT
    audit_like.save(update_fields=["purpose"])
    play_run(audit_like)
    play_run(run_services.run_create(team=team, actor=owner, version=version, agent=solver, task_ids=["coin"], seeds=[0, 1]))
    random_stats = {t["task_id"]: t for t in owner_api.get(f"{URL}/stats", {"agent": "random"}).json()["tasks"]}
    assert random_stats["never"]["rollouts"] == 32  # the audit's two rollouts are not counted
    solver_stats = {t["task_id"]: t for t in owner_api.get(f"{URL}/stats", {"agent": "solver"}).json()["tasks"]}
    assert solver_stats["coin"]["rollouts"] == 2 and solver_stats["coin"]["pass_rate"] == 1.0
    assert solver_stats["easy"]["band"] == "unknown"


def test_a_version_without_statistics_samples_uniformly_and_says_so(owner_api, team, owner):
    package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    random_agent(team, owner)
    body = owner_api.post(f"{URL}/sample", json.dumps({"agent": "random", "k": 5, "strategy": "learnable"})).json()
    assert len(body["tasks"]) == 5 and "sampled uniformly" in body["note"]


@pytest.mark.parametrize("body, field", [
    ({"agent": "nobody", "k": 3}, "agent"),
    ({"agent": "random", "k": 0}, "k"),
    ({"agent": "random", "k": 10_001}, "k"),
    ({"agent": "random", "k": 3, "strategy": "greedy"}, "strategy"),
])
def test_bad_sample_requests_are_a_400_naming_the_field(owner_api, team, owner, body, field):
    package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    random_agent(team, owner)
    response = owner_api.post(f"{URL}/sample", json.dumps(body))
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


def test_another_team_cannot_read_the_statistics(outsider_api, outsider, team, owner):
    package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    assert login(outsider).get("/t/alpha/curriculum/versions/bands/1/tasks/").status_code == 404
    assert outsider_api.get(f"{URL}/stats", {"agent": "random"}).status_code == 404


def test_the_posterior_is_confident_only_with_enough_rollouts():
    low, high, mass = posterior(np.array([12.0, 31.0, 0.0]), np.array([0.0, 0.0, 31.0]))
    assert low[0] < 0.9 < low[1]  # 12/12 is not yet confidently easy, 31/31 is
    assert high[2] < 0.1 and mass[2] < 0.05


@pytest.mark.integration
def test_a_curriculum_run_on_a_real_worker_picks_each_task_as_it_is_dispatched(owner_api, measured, celery_worker):
    """After the random agent's statistics say easy is too easy and never too hard, a learnable curriculum
    sends its rollouts to the coin, never to the held-out task; statistics grow as they finish."""
    response = owner_api.post("/runs", json.dumps({"version": "bands@1", "agent": "random", "seeds": "200-219",
                                                   "task_ids": "curriculum:learnable", "count": 20}))
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    run = wait_for(lambda: owner_api.get(f"/runs/{run_id}").json()["summary"]["pending"] == 0 and
                   owner_api.get(f"/runs/{run_id}").json(), timeout=120, what="the curriculum run to finish")
    assert run["summary"]["done"] == 20
    picked = {task: figures_["total"] for task, figures_ in run["summary"]["by_task"].items()}
    assert "held-out" not in picked and "" not in picked
    assert picked.get("coin", 0) >= 16, picked
    coin = next(t for t in owner_api.get(f"{URL}/stats", {"agent": "random"}).json()["tasks"] if t["task_id"] == "coin")
    assert coin["rollouts"] == 32 + picked["coin"]


@pytest.mark.parametrize("body, field", [
    ({"task_ids": "curriculum:greedy", "count": 3}, "task_ids"),
    ({"task_ids": "curriculum", "count": None}, "count"),
])
def test_bad_curriculum_runs_are_refused_by_field(owner_api, team, owner, body, field):
    package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    response = owner_api.post("/runs", json.dumps({"version": "bands@1", "agent": "random", **body}))
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


def test_the_train_eval_gap_per_agent_is_in_the_stats_and_on_the_task_map(owner_api, owner, team):
    """The random agent always passes its training task (easy) and passes the held-out coin about half the
    time: the gap is train minus eval, per agent, in the API and on the version page's task map."""
    version = package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    play_run(run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                                     task_ids=["easy", "held-out"], seeds=list(range(16))))
    body = owner_api.get(f"{URL}/stats", {"agent": "random"}).json()
    splits = body["splits"]
    assert splits["train"] == {"tasks": 3, "measured": 1, "rollouts": 16, "pass_rate": 1.0}
    assert splits["eval"]["tasks"] == 1 and splits["eval"]["rollouts"] == 16
    held_out = next(t for t in body["tasks"] if t["task_id"] == "held-out")
    assert held_out["split"] == "eval" and splits["eval"]["pass_rate"] == held_out["pass_rate"] < 1.0
    assert splits["gap"] == round(1.0 - held_out["pass_rate"], 4) > 0
    page = login(owner).get("/t/alpha/curriculum/versions/bands/1/tasks/").content.decode()
    assert f'data-agent="random" data-gap="{splits["gap"]}"' in page and "Train vs eval" in page


def test_statistics_that_forget_are_kept_as_rollouts_finish_and_steer_the_recent_sampler(owner_api, team, owner):
    """Each finishing rollout decays its task's recent counts (the SQL matches the Python reference); with
    `recent`, learnable stops drawing a task the agent has lately mastered though its all-time record is mixed."""
    from runs.curriculum.models import TaskStat
    from runs.curriculum.stats import recent_counts_after

    version = package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    rollouts = play_run(run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                                                task_ids=["coin"], seeds=list(range(12))))
    expected = (0.0, 0.0)
    for rollout in sorted(rollouts, key=lambda r: (r.finished_at, r.pk)):
        expected = recent_counts_after(rollouts=expected[0], successes=expected[1], success=rollout.status == "succeeded")
    coin = TaskStat.objects.get(environment_version=version, agent_name="random", task_id="coin")
    assert (coin.rollouts, round(coin.recent_rollouts, 6), round(coin.recent_successes, 6)) == (
        12, round(expected[0], 6), round(expected[1], 6))
    assert 0 < coin.recent_rollouts < 12  # older rollouts weigh less

    # All-time, coin is a coin (100 of 200); lately (its last ~32) the agent passes it every time.
    TaskStat.objects.filter(pk=coin.pk).update(rollouts=200, successes=100, recent_rollouts=32.0, recent_successes=32.0)
    TaskStat.objects.create(team=team, environment_version=version, task_id="easy", agent_name="random", rollouts=200,
                            successes=200, recent_rollouts=32.0, recent_successes=32.0)
    TaskStat.objects.create(team=team, environment_version=version, task_id="never", agent_name="random", rollouts=20,
                            successes=10, recent_rollouts=20.0, recent_successes=10.0)  # (here: the one still learnable)

    def sample(**body):
        response = owner_api.post(f"{URL}/sample", json.dumps({"agent": "random", "k": 300, "seed": 1, "strategy": "learnable", **body}))
        assert response.status_code == 200, response.content
        return response.json()["tasks"]

    assert sample().count("coin") > 100  # all-time: coin still looks learnable
    lately = sample(recent=True)
    assert lately.count("coin") < 15 and lately.count("never") > 270, lately.count("coin")
    stats = {t["task_id"]: t for t in owner_api.get(f"{URL}/stats", {"agent": "random"}).json()["tasks"]}
    assert stats["coin"]["pass_rate"] == 0.5 and stats["coin"]["recent_pass_rate"] == 1.0
