"""Small things a page must get right: seeds as ranges, the reproduction record as a table, no code
hash for agents without code, and the way around (Agents in the nav, favicon, back from the API docs)."""
import pytest

from runs import services
from runs.seeds import format_seeds, parse_seeds
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


@pytest.mark.parametrize("seeds,text", [([0], "0"), (list(range(20)), "0-19"), ([0, 1, 2, 5, 7, 8], "0-2, 5, 7-8"), ([3, 1, 2, 2], "1-3")])
def test_seeds_read_as_ranges_and_parse_back(seeds, text):
    assert format_seeds(seeds) == text
    assert parse_seeds(text) == sorted(set(seeds))


@pytest.fixture
def run(team, owner):
    version = package_version(team, owner, "truths", ENV_PY)
    return services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=list(range(20)), enqueue=False)


def test_the_run_page_shows_seeds_as_a_range(run, owner, team):
    assert "seeds 0-19 ·" in login(owner).get(f"/t/{team.slug}/runs/{run.pk}/").content.decode()


def test_an_agent_without_code_has_no_code_hash(team, owner):
    agent = random_agent(team, owner)
    assert agent.code_hash == ""
    assert random_agent(team, owner).pk == agent.pk  # the same agent again, not a "random-<hash>" twin


def test_the_reproduction_record_is_a_table_by_section(run, owner, team):
    rollout = run.rollouts.first()
    Rollout.objects.filter(pk=rollout.pk).update(reproduction={
        "environment": "truths", "version": "truths@1", "seed": 0, "agent": {"name": "random", "kind": "random", "code_hash": ""},
        "limits": {"max_steps": 50}, "sandbox": {"backend": "process", "limits": {"nproc": 32}},
    })
    page = login(owner).get(f"/t/{team.slug}/rollouts/{rollout.pk}/").content.decode()
    for section in ("Episode", "Agent", "Limits", "Environment sandbox"):
        assert f"<summary>{section}</summary>" in page
    assert '<th scope="row">seed</th><td><code>0</code></td>' in page
    assert '<th scope="row">limits.nproc</th>' in page
    assert '<th scope="row">code_hash</th><td><span class="muted">—</span></td>' in page


def test_navigation_has_agents_a_favicon_and_a_way_back_from_the_api_docs(owner, team):
    client = login(owner)
    page = client.get(f"/t/{team.slug}/runs/").content.decode()
    assert f'href="/t/{team.slug}/agents/"' in page and 'rel="icon"' in page
    assert client.get("/favicon.ico").status_code == 301
    docs = client.get("/api/v1/docs").content.decode()
    assert 'id="back-to-studio"' in docs and "favicon.svg" in docs


def test_pages_with_shortcuts_list_them_for_the_question_mark_key(run, owner, team):
    client = login(owner)
    rollout_page = client.get(f"/t/{team.slug}/rollouts/{run.rollouts.first().pk}/").content.decode()
    assert 'id="shortcuts"' in rollout_page and "previous / next step" in rollout_page
