"""The replay shows an environment's image observations (a 210x160x3 uint8 frame a step) as images,
stepping with the keyboard, in Chromium."""
import pytest

from runs.models import RolloutStatus
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.runs.rollout_factories import demo_agent_code, demo_version, play_one, scripted_agent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOT = "/tmp/pixel_catch_replay.png"


@pytest.fixture
def pixel_rollout(settings, tmp_path, team, owner):
    settings.MEDIA_ROOT = str(tmp_path)
    version = demo_version(team, owner, "pixel_catch")
    rollout = play_one(team, owner, version, scripted_agent(team, owner, demo_agent_code("pixel_catch")), task_id="slow")
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
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
    # The text view names the array instead of printing 100,800 numbers.
    assert page.locator("#replay-observation").inner_text() == "<uint8 array 210×160×3: image>"
    first = image.get_attribute("src")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("(src) => document.querySelector('#replay-obs-images img').getAttribute('src') !== src", arg=first)
    assert page.locator("#replay-position").inner_text() == "step 1 / %d" % (pixel_rollout.step_count - 1)
    for _ in range(40):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('#replay-obs-images img').complete")
    page.screenshot(path=SCREENSHOT, full_page=True)
