"""Paired A/B (runs/quality/paired.py): two runs over the same instances compared instance by instance,
on the compare page, the API and `compare_ab`; the unpaired figures stay beside them."""
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from runs import services as run_services
from runs.quality import paired
from tests.conftest import login
from tests.runs.rollout_factories import package_version, play_run, scripted_agent

pytestmark = pytest.mark.django_db(transaction=True)

# Says yes or no; the verifier passes a yes.
YES_ENV = """
class Env:
    def reset(self, task, seed):
        self.said = None
        return "say yes"

    def step(self, action):
        self.said = action
        return "heard", 0.0, True, False, {}

    def verify(self):
        return (1.0 if self.said == "yes" else 0.0), f"said {self.said!r}"
"""
# An agent that says no on the seeds in FAILS, yes elsewhere.
AGENT = """
seed_now = None

def reset(task, seed):
    global seed_now
    seed_now = seed

def act(observation, info):
    return "no" if seed_now in FAILS else "yes"
"""
SEEDS = list(range(15))


def played_run(team, owner, version, *, fails, name):
    agent = scripted_agent(team, owner, AGENT.replace("FAILS", repr(set(fails)) if fails else "set()"), name=name)
    run = run_services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=SEEDS, enqueue=False)
    play_run(run)
    return run


@pytest.fixture
def yes_version(team, owner):
    return package_version(team, owner, "say-yes", YES_ENV, max_steps=1)


def test_two_runs_that_disagree_on_four_of_fifteen_instances_show_four_flips_and_mcnemar_p_one(team, owner, owner_api, yes_version):
    # Both fail seed 4; A fails 2 and 3 (B passes them), B fails 0 and 1 (A passes them): 12/15 each side.
    run_a = played_run(team, owner, yes_version, fails={2, 3, 4}, name="a-agent")
    run_b = played_run(team, owner, yes_version, fails={0, 1, 4}, name="b-agent")
    body = owner_api.get(f"/quality/compare?runs={run_a.pk},{run_b.pk}").json()
    # The unpaired figures see the same means and say nothing changed, as they did before.
    assert body["result"]["mean_difference"] == 0.0 and body["result"]["p_value"] == 1.0
    result = body["paired"]
    assert result["pairs"] == 15 and result["a_unpaired"] == result["b_unpaired"] == 0
    assert (result["a_only"], result["b_only"], result["both_pass"], result["both_fail"]) == (2, 2, 10, 1)
    assert result["mcnemar"] == {"test": "exact binomial", "discordant": 4, "p_value": 1.0}
    assert result["mean_difference"] == 0.0 and result["ci95"][0] < 0 < result["ci95"][1]
    flips = {(flip["seed"], flip["a"]["passed"], flip["b"]["passed"]) for flip in result["flips"]}
    assert flips == {(0, True, False), (1, True, False), (2, False, True), (3, False, True)}
    a_rollouts = set(run_a.rollouts.values_list("id", flat=True))
    assert all(flip["a"]["rollout"] in a_rollouts and flip["b"]["rollout"] not in a_rollouts for flip in result["flips"])

    page = login(owner).get(reverse("quality:compare", kwargs={"team": team.slug}), {"runs": f"{run_a.pk},{run_b.pk}"})
    html = page.content.decode()
    assert html.index('id="ab-paired"') < html.index('id="ab-summary"')  # the page leads with the paired result
    assert "p = 1.0000" in html and "exact binomial, 4 discordant" in html
    assert html.count("/rollouts/") >= 8  # both rollouts of each of the 4 flips
    flip = result["flips"][0]
    assert f'/t/{team.slug}/rollouts/{flip["a"]["rollout"]}/' in html and f'/t/{team.slug}/rollouts/{flip["b"]["rollout"]}/' in html

    out = StringIO()
    call_command("compare_ab", "--team", team.slug, "--runs", f"{run_a.pk},{run_b.pk}", stdout=out)
    assert "A only 2, B only 2; McNemar p = 1.0000 (exact binomial)" in out.getvalue()


def test_six_flips_all_one_way_give_a_small_p_and_an_interval_above_zero(team, owner, owner_api, yes_version):
    run_a = played_run(team, owner, yes_version, fails=set(range(6)), name="a-agent")
    run_b = played_run(team, owner, yes_version, fails=set(), name="b-agent")
    result = owner_api.get(f"/quality/compare?runs={run_a.pk},{run_b.pk}").json()["paired"]
    assert (result["a_only"], result["b_only"]) == (0, 6)
    assert result["mcnemar"]["p_value"] == round(2 / 2 ** 6, 4)  # 0.0312: every flip one way
    assert result["mean_difference"] == 0.4 and result["ci95"][0] > 0
    # Two agents on one version, named instead of their runs, give the same paired figures.
    by_agents = owner_api.get("/quality/compare", {"a": "say-yes@1", "agent": "a-agent", "agent_b": "b-agent"}).json()
    assert by_agents["paired"]["mcnemar"] == result["mcnemar"] and by_agents["b_label"] == "say-yes@1 (b-agent)"


def test_runs_with_no_common_instance_say_so_instead_of_a_number(team, owner, owner_api, yes_version):
    agent = scripted_agent(team, owner, AGENT.replace("FAILS", "set()"))
    runs = [run_services.run_create(team=team, actor=owner, version=yes_version, agent=agent, seeds=seeds, enqueue=False)
            for seeds in ([0, 1], [7, 8])]
    for run in runs:
        play_run(run)
    body = owner_api.get(f"/quality/compare?runs={runs[0].pk},{runs[1].pk}").json()
    assert body["paired"]["pairs"] == 0 and body["paired"]["mean_difference"] is None
    assert body["paired"]["mcnemar"]["p_value"] is None and "nothing to pair" in body["paired"]["note"]
    assert body["result"]["mean_difference"] == 0.0  # the unpaired figures still compare the tasks
    html = login(owner).get(reverse("quality:compare", kwargs={"team": team.slug}), {"runs": f"{runs[0].pk},{runs[1].pk}"}).content.decode()
    assert "nothing to pair" in html and 'data-figure="paired_difference"' not in html


def rows(outcomes, *, first_id=1):
    return [{"id": first_id + i, "task_id": "t", "seed": i, "repeat": 0, "status": "succeeded" if ok else "failed",
             "verifier_reward": float(ok)} for i, ok in enumerate(outcomes)]


def test_few_pairs_get_no_interval_and_mcnemar_switches_to_chi_square_for_many_flips():
    few = paired.paired_figures(a_rows=rows([1, 0, 1]), b_rows=rows([1, 1, 1], first_id=100))
    assert few["pairs"] == 3 and few["ci95"] is None and "too few for a bootstrap interval" in few["note"]
    assert few["mcnemar"]["p_value"] == 1.0  # one flip: exact, and nothing to conclude
    # 30 flips, 20 one way: chi-square (|20 - 10| - 1)^2 / 30 = 2.7, p = 0.1003 (the chi-square tail at 2.7 on one degree of freedom is 0.10035).
    test = paired.mcnemar(a_only=10, b_only=20)
    assert test["test"] == "chi-square, continuity-corrected" and test["statistic"] == 2.7 and test["p_value"] == 0.1003
    # The interval is seeded: the same rows give the same interval.
    a, b = rows([i % 3 == 0 for i in range(20)]), rows([i % 2 == 0 for i in range(20)], first_id=100)
    assert paired.paired_figures(a_rows=a, b_rows=b)["ci95"] == paired.paired_figures(a_rows=a, b_rows=b)["ci95"]


def test_a_bad_comparison_is_a_400_naming_the_field(team, owner, owner_api, yes_version):
    scripted_agent(team, owner, AGENT.replace("FAILS", "set()"), name="only")
    response = owner_api.get("/quality/compare", {"a": "say-yes@1", "agent": "only", "agent_b": "nobody"})
    assert response.status_code == 400 and response.json()["field"] == "agent_b"
    response = owner_api.get("/quality/compare", {"a": "say-yes@1", "b": "say-yes@1", "agent": "only"})
    assert response.status_code == 400 and response.json()["field"] == "b"
