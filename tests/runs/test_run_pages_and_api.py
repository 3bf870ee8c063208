"""Runs, rollouts and agents through the pages and the API: scoping, validation, the same services."""
import pytest

from runs import services
from runs.models import Agent, Rollout, Run
from runs.tasks import execute_rollout
from tests.conftest import api_for, login
from tests.runs.rollout_factories import demo_agent_code, demo_version


@pytest.fixture
def guess(team, owner):
    return demo_version(team, owner, "guess_number")


@pytest.fixture
def finished_run(team, owner, guess):
    agent = services.agent_create(team=team, actor=owner, name="bisect", kind="scripted", code=demo_agent_code("guess_number"))
    run = services.run_create(team=team, actor=owner, version=guess, agent=agent, task_ids=["t1"], seeds=[0, 1])
    for r in run.rollouts.all():
        execute_rollout(r.pk)
    return run


def test_api_creates_a_run_of_every_task_with_random_agent(owner_api, guess):
    r = owner_api.post("/runs", {"version": "guess-number@1", "agent": "random", "seeds": "0-2"})
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["version"] == "guess-number@1" and body["seeds"] == [0, 1, 2]
    assert body["summary"]["total"] == 3 * len(guess.tasks)
    assert Run.objects.get(pk=body["id"]).agent.kind == "random"


@pytest.mark.parametrize(
    "payload,field",
    [
        ({"version": "guess-number", "seeds": "0"}, "version"),
        ({"version": "guess-number@1", "seeds": "9-1"}, "seeds"),
        ({"version": "guess-number@1", "seeds": "x"}, "seeds"),
        ({"version": "guess-number@1", "task_ids": ["nope"]}, "task_ids"),
        ({"version": "guess-number@1", "agent": 99999}, "agent"),
        ({"version": "guess-number@1", "repeats": 0}, "repeats"),
    ],
)
def test_bad_run_requests_are_4xx_naming_the_field(owner_api, guess, payload, field):
    r = owner_api.post("/runs", payload)
    assert 400 <= r.status_code < 500, r.content
    assert r.json().get("field") == field, r.json()


def test_run_of_unknown_version_is_404(owner_api, guess):
    assert owner_api.post("/runs", {"version": "guess-number@7"}).status_code == 404


def test_api_reads_rollouts_and_pages_of_steps(owner_api, finished_run):
    rollouts = owner_api.get(f"/runs/{finished_run.pk}/rollouts").json()
    assert [r["status"] for r in rollouts] == ["succeeded", "succeeded"]
    rid = rollouts[0]["id"]
    detail = owner_api.get(f"/rollouts/{rid}").json()
    assert detail["verifier_reward"] == 1.0 and detail["labels"][0]["decision"] == "proposed"
    assert detail["reproduction"]["content_hash"] == finished_run.environment_version.content_hash
    page = owner_api.get(f"/rollouts/{rid}/steps", {"offset": 1, "limit": 2}).json()
    assert page["count"] == detail["step_count"] and [s["index"] for s in page["steps"]] == [1, 2]


def test_rerun_through_the_api_reports_identical(owner_api, finished_run):
    rid = finished_run.rollouts.first().pk
    new = owner_api.post(f"/rollouts/{rid}/rerun").json()
    execute_rollout(new["id"])
    c = owner_api.get(f"/rollouts/{new['id']}/comparison").json()
    assert c["identical"] is True and c["original"] == rid


def test_viewer_cannot_start_runs(viewer, team, guess):
    assert api_for(viewer, team).post("/runs", {"version": "guess-number@1"}).status_code == 403


def test_other_teams_runs_rollouts_and_agents_are_404(outsider_api, outsider, finished_run):
    rid = finished_run.rollouts.first().pk
    aid = finished_run.agent_id
    for method, path in [
        ("get", f"/runs/{finished_run.pk}"), ("get", f"/runs/{finished_run.pk}/rollouts"),
        ("post", f"/runs/{finished_run.pk}/cancel"), ("get", f"/rollouts/{rid}"), ("get", f"/rollouts/{rid}/steps"),
        ("post", f"/rollouts/{rid}/rerun"), ("get", f"/agents/{aid}"),
    ]:
        assert getattr(outsider_api, method)(path).status_code == 404, path
    assert outsider_api.get("/runs").json() == []
    assert outsider_api.post("/runs", {"version": "guess-number@1"}).status_code == 404
    c = login(outsider)
    for url in [f"/t/alpha/runs/{finished_run.pk}/", f"/t/alpha/rollouts/{rid}/", f"/t/alpha/agents/{aid}/", "/t/alpha/runs/",
                f"/t/alpha/rollouts/{rid}/steps.json", f"/t/alpha/rollouts/{rid}/timeline.json"]:
        assert c.get(url).status_code == 404, url
    assert c.post(f"/t/alpha/rollouts/{rid}/rerun/").status_code == 404
    assert Rollout.objects.filter(rerun_of_id=rid).count() == 0


def test_replay_windows_and_timeline(owner, finished_run):
    r = finished_run.rollouts.first()
    c = login(owner)
    timeline = c.get(f"/t/alpha/rollouts/{r.pk}/timeline.json").json()
    assert timeline["indexes"] == list(range(r.step_count)) and timeline["rollout"]["status"] == "succeeded"
    window = c.get(f"/t/alpha/rollouts/{r.pk}/steps.json", {"offset": 1, "limit": 2}).json()
    assert [s["index"] for s in window["steps"]] == [1, 2]
    assert c.get(f"/t/alpha/rollouts/{r.pk}/steps.json", {"offset": "x"}).status_code == 400


def test_pages_show_runs_rollouts_and_steps(owner, finished_run):
    c = login(owner)
    r = finished_run.rollouts.first()
    page = c.get(f"/t/alpha/runs/{finished_run.pk}/").content.decode()
    assert "100%" in page and f"#{r.pk}" in page
    page = c.get(f"/t/alpha/rollouts/{r.pk}/").content.decode()
    assert "guessed" in page and "proposed" in page and "too low" in page or "too high" in page
    assert c.get("/t/alpha/runs/").status_code == 200


def test_new_run_page_starts_a_run(owner, guess):
    c = login(owner)
    assert c.get("/t/alpha/runs/new/?version=guess-number@1").status_code == 200
    r = c.post("/t/alpha/runs/new/", {"version": "guess-number@1", "agent": "random", "tasks": "t1,t2", "seeds": "0-1", "repeats": 1, "reviews_required": 1})
    assert r.status_code == 302
    run = Run.objects.get()
    assert run.rollouts.count() == 4


def test_new_run_page_shows_bad_seeds(owner, guess):
    r = login(owner).post("/t/alpha/runs/new/", {"version": "guess-number@1", "agent": "random", "tasks": "all", "seeds": "5-1", "repeats": 1, "reviews_required": 1})
    assert r.status_code == 200 and "backwards" in r.content.decode()
    assert not Run.objects.exists()


def test_agent_page_creates_scripted_agent(owner):
    r = login(owner).post("/t/alpha/agents/new/", {"name": "always-zero", "kind": "scripted", "code": "def act(observation, info):\n    return 0\n"})
    assert r.status_code == 302
    assert Agent.objects.get(name="always-zero").code_hash
    r = login(owner).post("/t/alpha/agents/new/", {"name": "broken", "kind": "scripted", "code": "def act(:\n"})
    assert r.status_code == 200 and not Agent.objects.filter(name="broken").exists()


def test_agent_page_creates_an_openai_agent_and_never_shows_the_key(owner):
    c = login(owner)
    r = c.post("/t/alpha/agents/new/", {"name": "qwen", "kind": "openai", "base_url": "http://127.0.0.1:9/v1",
                                         "model": "qwen", "api_key": "sk-very-secret", "temperature": "0.2"})
    assert r.status_code == 302, r.content.decode()[:2000]
    agent = Agent.objects.get(name="qwen")
    assert agent.config["model"] == "qwen" and "api_key" not in agent.config
    page = c.get(r["Location"]).content.decode()
    assert "set (hidden)" in page and "sk-very-secret" not in page
    r = c.post("/t/alpha/agents/new/", {"name": "no-url", "kind": "openai", "model": "m"})
    assert r.status_code == 200 and not Agent.objects.filter(name="no-url").exists()


def test_steps_carry_the_url_of_their_screenshot(owner_api, finished_run):
    from runs.models import Step

    rollout = finished_run.rollouts.first()
    Step.objects.filter(rollout=rollout, index=0).update(artifact="artifacts/rollouts/1/00000.jpg")
    steps = owner_api.get(f"/rollouts/{rollout.pk}/steps", {"limit": 2}).json()["steps"]
    assert steps[0]["artifact_url"] == "/artifacts/rollouts/1/00000.jpg"
    assert steps[1]["artifact_url"] is None
