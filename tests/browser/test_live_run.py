"""Watching a run live in Chromium: steps appear on the run page and in the replay viewer while the
rollout runs (real worker, real websocket), then the viewer scrubs back and plays."""
import pytest

from runs import services
from runs.models import Rollout
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.processes import asgi_server, celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SLOW_ENV = """
import time

class Env:
    action_space = {"type": "discrete", "n": 3}

    def reset(self, task, seed):
        self.n = 0
        return {"n": 0, "note": "start"}

    def step(self, action):
        time.sleep(0.12)
        self.n += 1
        return {"n": self.n, "last": action}, 0.1, self.n >= 40, False, {}

    def verify(self):
        return (1.0 if self.n >= 40 else 0.0), f"counted to {self.n}"
"""


def test_run_page_and_viewer_follow_a_live_rollout(page, asgi_server, celery_worker, team, owner):
    version = package_version(team, owner, "slow-counter", SLOW_ENV, limits={"step_timeout_s": 5, "episode_timeout_s": 60})
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    log_in(page, asgi_server, "olivia", PASSWORD)
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids="all", seeds=[0])
    rollout = run.rollouts.get()

    page.goto(f"{asgi_server}/t/alpha/runs/{run.pk}/")
    # The row's step count grows and the "running now" panel shows its latest step, without a reload.
    page.wait_for_selector(f"#rollout-{rollout.pk} .badge.running", timeout=20_000)
    page.wait_for_selector(".live-item", timeout=10_000)
    first = int(page.locator(f"#rollout-{rollout.pk} [data-k=steps]").inner_text())
    page.wait_for_function(
        f"Number(document.querySelector('#rollout-{rollout.pk} [data-k=steps]').textContent) > {first + 3}", timeout=10_000
    )

    page.goto(f"{asgi_server}/t/alpha/rollouts/{rollout.pk}/")
    page.wait_for_selector("#replay.ready")
    assert page.locator("#replay-live").is_visible()
    seen = page.evaluate("window.studioReplay.state.count")
    page.wait_for_function(f"window.studioReplay.state.count > {seen + 3}", timeout=10_000)
    # Following the head while live.
    assert page.evaluate("window.studioReplay.state.pos") >= seen

    wait_for(lambda: Rollout.objects.get(pk=rollout.pk).is_finished, 30, "the rollout to finish")
    page.wait_for_selector("#replay-verdict:not([hidden])", timeout=10_000)
    assert "counted to 40" in page.locator("#replay-verdict").inner_text()
    assert page.evaluate("window.studioReplay.state.count") == 40
    # The page around the viewer follows too: header, outcome and labels as a reload shows them.
    finished = Rollout.objects.get(pk=rollout.pk)
    page.wait_for_selector(f"#rollout-head .badge.{finished.status}", timeout=10_000)
    assert "proposed" in page.locator("#rollout-outcome").inner_text()
    live_outcome = page.locator("#rollout-outcome").inner_text()
    page.reload()
    page.wait_for_selector("#replay.ready")
    assert page.locator("#rollout-outcome").inner_text() == live_outcome

    page.keyboard.press("Home")
    page.wait_for_function("document.getElementById('replay-position').textContent.startsWith('start')")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("document.getElementById('replay-position').textContent.startsWith('step 1 ')")
    # After the reload the steps come from the REST windows: the observation follows the position.
    page.wait_for_function("document.getElementById('replay-observation').textContent.includes('n: 2')")
    page.select_option("#replay-speed", "10")
    page.keyboard.press(" ")
    page.wait_for_function("window.studioReplay.state.pos >= 10", timeout=5_000)
