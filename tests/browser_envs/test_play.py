"""Play mode: an author acts as the agent of a browser environment from the studio page."""
import json

import pytest

from runs.models import AgentKind, Step
from tests.browser_envs.conftest import browser_version
from tests.conftest import login
from tests.processes import episode_host, episode_host_prefix  # noqa: F401 - fixtures
from tests.runs.rollout_factories import DEMO_DIR, read_folder

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("episode_host")]


def test_author_plays_the_form_from_the_page_and_gets_a_verified_human_rollout(team, owner, media_in_tmp):
    version = browser_version(team, owner, "web_form", read_folder(DEMO_DIR / "web_form"))
    client = login(owner)
    assert client.get(f"/t/{team.slug}/play/?version={version.label}").status_code == 200

    started = client.post(f"/t/{team.slug}/play/start/", {"version": version.label, "task_id": "basic", "seed": "0"})
    assert started.status_code == 302
    page_url = started["Location"]
    page = client.get(page_url)
    assert page.status_code == 200 and b"[1] input[text] name=name" in page.content
    assert b'src="/artifacts/rollouts/' in page.content  # the first screenshot, through the team-checked view

    def act(action):
        response = client.post(page_url + "act/", json.dumps(action), content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    act({"action": "fill", "selector": "input[name=name]", "value": "Ada Lovelace"})
    act({"action": "fill", "selector": "input[name=email]", "value": "ada@example.org"})
    submitted = act({"action": "click", "selector": "button[type=submit]"})
    assert submitted["observation"]["title"] == "Welcome"
    assert submitted["artifact_url"].startswith("/artifacts/rollouts/")
    assert act({"action": "done", "answer": "signed up"})["done"] is True

    finished = client.post(page_url + "finish/")
    assert finished.status_code == 302
    rollout_id = int(finished["Location"].rstrip("/").rsplit("/", 1)[1])
    steps = Step.objects.filter(rollout_id=rollout_id).order_by("index")
    rollout = steps[0].rollout
    assert (rollout.status, rollout.verifier_reward, rollout.run.agent.kind) == ("succeeded", 1.0, AgentKind.HUMAN)
    assert rollout.run.purpose == "play"  # a run of its own, out of the runs list and review queue by default
    assert [s.action["action"] for s in steps] == ["fill", "fill", "click", "done"]
    assert all(s.artifact for s in steps)
    # The play is gone: acting again is a 404, and an outsider never sees it.
    gone = client.post(page_url + "act/", json.dumps({"action": "wait"}), content_type="application/json")
    assert gone.status_code == 404


def test_outsider_cannot_act_in_a_play(team, owner, outsider, other_team):
    from runs import play

    version = browser_version(team, owner, "web_form", read_folder(DEMO_DIR / "web_form"))
    started = play.play_start(team=team, actor=owner, version=version, task_id="basic", seed=0)
    try:
        response = login(outsider).post(
            f"/t/{other_team.slug}/play/{started.id}/act/", json.dumps({"action": "wait"}), content_type="application/json"
        )
        assert response.status_code == 404
    finally:
        play.play_finish(team=team, play_id=started.id)


def test_author_plays_an_image_environment_and_the_page_shows_its_frames(team, owner):
    """Any environment can be played: its image-like arrays come back stored, as PNG URLs the page shows."""
    from tests.runs.rollout_factories import demo_version

    version = demo_version(team, owner, "pixel_catch")
    client = login(owner)
    version_page = client.get(f"/t/{team.slug}/environments/{version.environment.slug}/versions/{version.number}/")
    assert b"Play it yourself" in version_page.content
    started = client.post(f"/t/{team.slug}/play/start/", {"version": version.label, "task_id": "slow", "seed": "0"})
    assert started.status_code == 302
    page_url = started["Location"]
    page = client.get(page_url).content.decode()
    # The first frame, stored at reset, as a PNG through the team-checked view; one button per action.
    assert 'id="play-initial"' in page and ".png" in page and "/artifacts/rollouts/" in page
    assert all(f'data-action="{action}"' in page for action in (0, 1, 2))

    response = client.post(page_url + "act/", json.dumps(2), content_type="application/json")
    assert response.status_code == 200, response.content
    frame = response.json()["observation"]["__ndarray__"]
    assert (frame["dtype"], frame["shape"]) == ("uint8", [210, 160, 3])
    assert frame["url"].startswith("/artifacts/rollouts/") and frame["url"].endswith(".png")
    assert ".png" in client.get(page_url).content.decode().split('id="play-initial"')[1]

    finished = client.post(page_url + "finish/")
    rollout_id = int(finished["Location"].rstrip("/").rsplit("/", 1)[1])
    (step,) = Step.objects.filter(rollout_id=rollout_id)
    assert step.action == 2 and step.observation["__ndarray__"]["artifact"].endswith(".png")
    assert step.rollout.run.agent.kind == AgentKind.HUMAN
