"""The replay shows an environment's image observations (a 210x160x3 uint8 frame a step) as images,
stepping with the keyboard, in Chromium: the pixel-catch demo, and Atari Pong through ale-py in its
dependency environment."""
import re

import pytest

from runs.models import RolloutStatus
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.environments.depenv_support import build, deps, depenv_root, plugin_wheels  # noqa: F401 - fixtures
from tests.processes import episode_host, episode_host_prefix  # noqa: F401 - fixtures
from tests.runs.rollout_factories import demo_agent_code, demo_version, play_one, scripted_agent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOT = "/tmp/{name}_replay.png"
# (demo, task, run limits, status): Pong's rollout stops after 45 steps, enough to step through and
# too few for anyone to score (Pong's first point takes a few hundred steps): a game cut before any
# point is not a success by its [success] rule (return at least 1: a point ahead).
DEMOS = {"pixel_catch": ("slow", None, RolloutStatus.SUCCEEDED), "atari_pong": ("pong", {"max_steps": 45}, RolloutStatus.FAILED)}


@pytest.fixture(params=sorted(DEMOS))
def pixel_rollout(request, settings, tmp_path, team, owner):
    settings.MEDIA_ROOT = str(tmp_path)
    name = request.param
    task_id, limits, status = DEMOS[name]
    version = demo_version(team, owner, name)
    if version.dependency_environment_id:
        request.getfixturevalue("deps")
        assert build(version) == "ready", version.dependency_environment.error
    agent = scripted_agent(team, owner, demo_agent_code(name))
    rollout = play_one(team, owner, version, agent, task_id=task_id, limits=limits)
    assert (rollout.status, rollout.error) == (status, ""), rollout.error
    rollout.demo_name = name
    return rollout


def test_the_replay_shows_each_steps_frame_as_an_image(page, live_server, owner, pixel_rollout):
    log_in(page, live_server, owner.username, PASSWORD)
    page.goto(f"{live_server.url}/t/alpha/rollouts/{pixel_rollout.pk}/")
    image = page.locator("#replay-obs-images img")
    image.wait_for()
    page.wait_for_function("() => document.querySelector('#replay-obs-images img').naturalWidth > 0")
    size = page.evaluate("() => { const i = document.querySelector('#replay-obs-images img'); return [i.naturalWidth, i.naturalHeight]; }")
    assert size == [160, 210]
    assert page.locator("#replay-obs-images figcaption").inner_text() == "observation · uint8 210×160×3"
    # The text view names the array (and the start of its digest) instead of printing 100,800 numbers.
    assert re.fullmatch(r"<uint8 array 210×160×3: image, sha256 [0-9a-f]{8}>", page.locator("#replay-observation").inner_text())
    first = image.get_attribute("src")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("(src) => document.querySelector('#replay-obs-images img').getAttribute('src') !== src", arg=first)
    # A frame that changed is a changed line, as any other change of the observation (Pong's first
    # frames, before the serve, are the same picture in two files: unchanged).
    digests = [step.observation["__ndarray__"]["sha256"] for step in pixel_rollout.steps.order_by("index")[:2]]
    expected = "unchanged" if digests[0] == digests[1] else "1 line changed"
    assert page.locator("#replay-changed").inner_text() == expected
    assert page.locator("#replay-position").inner_text() == "step 1 / %d" % (pixel_rollout.step_count - 1)
    for _ in range(40):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('#replay-obs-images img').complete")
    page.screenshot(path=SCREENSHOT.format(name=pixel_rollout.demo_name), full_page=True)


def host_media_root(host) -> str:
    """The episode host's MEDIA_ROOT (its process environment): the live server serves what it stored."""
    variables = dict(item.split("=", 1) for item in open(f"/proc/{host.pid}/environ").read().split("\0") if "=" in item)
    return variables["MEDIA_ROOT"]


def test_playing_an_image_environment_shows_its_frames(page, live_server, settings, owner, team, request):
    """Play mode for a python environment: the frame is an image, a discrete action is a button."""
    request.getfixturevalue("episode_host_prefix")
    settings.MEDIA_ROOT = host_media_root(request.getfixturevalue("episode_host"))
    version = demo_version(team, owner, "pixel_catch")
    log_in(page, live_server, owner.username, PASSWORD)
    page.goto(f"{live_server.url}/t/{team.slug}/play/?version={version.label}")
    page.click("button.primary")
    page.locator("#play-obs-images img").wait_for()
    page.wait_for_function("() => document.querySelector('#play-obs-images img').naturalWidth === 160")
    assert page.locator("#play-obs-images figcaption").inner_text() == "observation · uint8 210×160×3"
    assert re.fullmatch(r"<uint8 array 210×160×3: image, sha256 [0-9a-f]{8}>", page.locator("#play-observation").inner_text())
    page.click("button[data-action='2']")
    page.wait_for_function("() => document.getElementById('play-status').textContent.startsWith('step 0')")
    assert page.locator("#play-obs-images img").get_attribute("src").endswith("/00000.o0.png")
    page.wait_for_function("() => document.querySelector('#play-obs-images img').naturalWidth === 160")
    page.screenshot(path="/tmp/pixel_catch_play.png", full_page=True)
    page.click("text=Finish and verify")
    page.wait_for_url("**/rollouts/**")
