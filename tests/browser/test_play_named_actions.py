"""Play and replay of an image game with named actions, in Chromium: Atari Pong itself (ale-py in the
demo's dependency environment, built from the local wheels), and a Pong-shaped game under the demo's
own environment.toml ([success], [actions] names and keys): a small numpy game of the same shape (a
210x160x3 frame, Discrete(6) actions with ALE's names, +1 a point won and -1 a point lost) whose
points come every 4th step, so winning one is a test's few key presses. A player who quits before
scoring has not succeeded; winning the point has; buttons, keys and replay speak NOOP, FIRE, UP, DOWN."""
import json
import re

import pytest

from environments import services as env_services
from environments.demo import DEMO_DIR
from runs.models import Rollout
from tests.browser.conftest import log_in
from tests.browser.test_image_observations import host_media_root
from tests.conftest import PASSWORD, api_for
from tests.environments.depenv_support import build, deps, depenv_root, plugin_wheels  # noqa: F401 - fixtures
from tests.processes import episode_host, episode_host_prefix, own_episode_host  # noqa: F401 - fixtures
from tests.runs.rollout_factories import demo_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Pong's actions as ALE numbers them: 0 NOOP, 1 FIRE, 2 RIGHT (up), 3 LEFT (down), 4-5 with FIRE.
# The ball reaches the paddle's column every 4th step at row 0: a paddle there wins the point.
MINI_PONG = """
import numpy as np


class MiniPong:
    action_space = {"type": "discrete", "n": 6, "names": ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]}

    def reset(self, task, seed):
        self.paddle, self.steps, self.score = 1, 0, [0, 0]
        return self.frame()

    def frame(self):
        screen = np.zeros((210, 160, 3), dtype=np.uint8)
        screen[40 + 50 * self.paddle:60 + 50 * self.paddle, 140:144] = (92, 186, 92)
        return screen

    def step(self, action):
        action = int(action)
        if action in (2, 4):
            self.paddle = max(self.paddle - 1, 0)
        elif action in (3, 5):
            self.paddle = min(self.paddle + 1, 2)
        self.steps += 1
        reward = 0.0
        if self.steps % 4 == 0:
            reward = 1.0 if self.paddle == 0 else -1.0
            self.score[0 if reward > 0 else 1] += 1
        return self.frame(), reward, max(self.score) >= 3, False, {"score": list(self.score)}
"""


def pong_shaped_version(team, actor):
    """The Pong demo's manifest, its entrypoint and dependencies swapped for MINI_PONG."""
    toml = (DEMO_DIR / "atari_pong" / "environment.toml").read_text()
    toml = toml.replace('entrypoint = "gymnasium:ale_py:ALE/Pong-v5"', 'entrypoint = "env:MiniPong"')
    toml = re.sub(r"^dependencies = .*$", "", toml, flags=re.M)
    assert 'entrypoint = "env:MiniPong"' in toml and "[actions]" in toml
    files = {"environment.toml": toml, "env.py": MINI_PONG, "tasks.jsonl": (DEMO_DIR / "atari_pong" / "tasks.jsonl").read_text()}
    env = env_services.environment_create(team=team, actor=actor, name="Mini pong", slug="mini-pong", files=files)
    return env_services.version_commit(environment=env, actor=actor, message="pong-shaped", files=files)


def start_playing(page, live_server, team, owner, version):
    log_in(page, live_server, owner.username, PASSWORD)
    page.goto(f"{live_server.url}/t/{team.slug}/play/?version={version.label}")
    page.select_option("select[name=task_id]", "pong")
    page.click("button.primary")
    # The session's first play waits for the episode host's sandbox (numpy's import included).
    page.locator("#play-obs-images img").wait_for(timeout=30_000)
    return page


# The host (and its Redis names) before `settings`, whose restore would take them back.
@pytest.fixture
def playing(episode_host, page, live_server, settings, team, owner):
    settings.MEDIA_ROOT = host_media_root(episode_host)
    return start_playing(page, live_server, team, owner, pong_shaped_version(team, owner))


def press(page, key: str, index: int, name: str):
    page.keyboard.press(key)
    page.wait_for_function(f"() => document.getElementById('play-status').textContent.startsWith('step {index} ·')")
    assert f"· {name} (" in page.locator("#play-status").inner_text()


def finished(page, team) -> dict:
    page.click("text=Finish and verify")
    page.wait_for_url("**/rollouts/**")
    rollout = Rollout.objects.get(run__purpose="play")
    return api_for(rollout.run.created_by, team).get(f"/rollouts/{rollout.pk}").json()


def test_a_pong_game_quit_after_three_moves_is_not_a_success(playing, team):
    page = playing
    # The start is marked, the actions are named and the keys are told.
    assert page.locator("#play-status").inner_text().startswith("ready")
    buttons = page.locator("button[data-action]").all_inner_texts()
    assert buttons[:4] == ["NOOP 0 .", "FIRE 1 Space", "UP 2 ↑", "DOWN 3 ↓"], buttons
    assert "↑ UP" in page.locator("#play-keys-help").inner_text()
    # The space line calls them as the buttons do (ALE's RIGHT and LEFT are renamed UP and DOWN).
    assert '"UP", "DOWN"' in page.locator("#play-action").inner_text()
    # The frame is scaled up from its 160 pixels.
    assert page.evaluate("document.querySelector('#play-obs-images img').getBoundingClientRect().width") == 480
    page.screenshot(path="/tmp/pong_shaped_play.png", full_page=True)
    for index, (key, name) in enumerate([("ArrowDown", "DOWN"), ("ArrowUp", "UP"), ("Space", "FIRE")]):
        press(page, key, index, name)
    rollout = finished(page, team)
    # Three moves and a quit, no point scored: return 0 is no success (it was, under return_at_least = -2).
    assert (rollout["status"], rollout["total_reward"], rollout["step_count"]) == ("failed", 0.0, 3), rollout
    assert [step["action"] for step in api_for_steps(team, rollout)] == [3, 2, 1]


def api_for_steps(team, rollout) -> list[dict]:
    owner = Rollout.objects.get(pk=rollout["id"]).run.created_by
    return api_for(owner, team).get(f"/rollouts/{rollout['id']}/steps", {"offset": 0, "limit": 10}).json()["steps"]


def test_winning_the_point_is_a_success_and_the_replay_names_each_action(playing, team, live_server):
    page = playing
    press(page, "ArrowUp", 0, "UP")
    for index in (1, 2, 3):
        press(page, ".", index, "NOOP")
    assert "reward 1" in page.locator("#play-status").inner_text()
    rollout = finished(page, team)
    assert (rollout["status"], rollout["total_reward"]) == ("succeeded", 1.0), rollout
    stored = Rollout.objects.get(pk=rollout["id"])
    assert stored.reproduction["action_names"] == dict(zip(map(str, range(6)), json.loads(
        '["NOOP", "FIRE", "UP", "DOWN", "UP+FIRE", "DOWN+FIRE"]')))
    page.goto(f"{live_server.url}/t/{team.slug}/rollouts/{rollout['id']}/")
    page.wait_for_selector("#replay.ready")
    # Each step's action by its name, the number beside it (a user's Home, then → to the first step).
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.getElementById('replay-position').textContent === 'step 0 / 3'")
    page.wait_for_function("() => document.getElementById('replay-action').textContent === 'UP (2)'")
    page.keyboard.press("End")
    page.wait_for_function("() => document.getElementById('replay-position').textContent === 'step 3 / 3'")
    page.wait_for_function("() => document.getElementById('replay-action').textContent === 'NOOP (0)'")
    page.screenshot(path="/tmp/pong_shaped_replay.png", full_page=True)
    # The step table says the same: each action by its name, the number beside it.
    page.click("summary:has-text('All steps as a table')")
    cells = page.locator("#steps table.steps tbody tr td:nth-child(2)").all_inner_texts()
    assert cells == ["UP (2)", "NOOP (0)", "NOOP (0)", "NOOP (0)"], cells
    page.locator("#steps").screenshot(path="/tmp/wt-review-shots/rollout-steps-named.png")


def test_atari_pong_quit_after_three_moves_is_not_a_success(deps, own_episode_host, page, live_server, settings, team,
                                                           owner, tmp_path):
    """The issue's walk: Pong, three moves, Finish. It was a success under return_at_least = -2."""
    version = demo_version(team, owner, "atari_pong")
    assert build(version) == "ready", version.dependency_environment.error
    media = tmp_path / "media"
    settings.MEDIA_ROOT = str(media)
    own_episode_host(MEDIA_ROOT=str(media))  # after `deps`: it finds the dependency environment
    start_playing(page, live_server, team, owner, version)
    # ALE's own names are RIGHT and LEFT for up and down: the version's [actions] names say what they do.
    assert page.locator("button[data-action]").all_inner_texts()[:4] == ["NOOP 0 .", "FIRE 1 Space", "UP 2 ↑", "DOWN 3 ↓"]
    page.wait_for_function("() => document.querySelector('#play-obs-images img').naturalWidth === 160")
    for index, (key, name) in enumerate([("Space", "FIRE"), ("ArrowUp", "UP"), ("ArrowDown", "DOWN")]):
        press(page, key, index, name)
    page.screenshot(path="/tmp/atari_pong_play.png", full_page=True)
    rollout = finished(page, team)
    assert (rollout["status"], rollout["total_reward"], rollout["step_count"]) == ("failed", 0.0, 3), rollout
    # ALE's action numbers went to the game; the names stayed on the page.
    assert [step["action"] for step in api_for_steps(team, rollout)] == [1, 2, 3]
