"""The run page's "Running now" panel holds exactly the running rollouts: rollouts that ended fast leave it
at once, a running one is there before and after a reload, and the panel matches on both."""
import pytest

from runs import services
from runs.models import Rollout
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.processes import asgi_server, celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ENV = """
import time

class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        self.task, self.n = task["id"], 0
        if self.task == "slow":
            time.sleep(6)  # running, with no step yet
        return 0

    def step(self, action):
        if self.task.startswith("boom"):
            raise RuntimeError("this task breaks at its first step")
        time.sleep(0.5)
        self.n += 1
        return self.n, 0.0, self.n >= 40, False, {}

    def verify(self):
        return 1.0, "counted"
"""
TASKS = [{"id": f"boom-{i}", "difficulty": 1} for i in range(4)] + [{"id": "slow", "difficulty": 1}]


def panel_ids(page):
    return page.eval_on_selector_all("#live-steps-list .live-item strong", "nodes => nodes.map(n => n.textContent)")


def test_running_now_lists_exactly_the_running_rollouts_live_and_after_reload(page, asgi_server, celery_worker, team, owner):
    version = package_version(team, owner, "mixed-ends", ENV, tasks=TASKS, limits={"step_timeout_s": 5, "episode_timeout_s": 90})
    log_in(page, asgi_server, "olivia", PASSWORD)
    page.goto(f"{asgi_server}/t/alpha/runs/")
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids="all", seeds=[0])
    page.goto(f"{asgi_server}/t/alpha/runs/{run.pk}/")
    slow = run.rollouts.get(task_id="slow")

    # The broken tasks end errored within seconds while the slow one counts on.
    wait_for(lambda: Rollout.objects.filter(run=run, status="errored").count() == 4, 40, "the broken rollouts to end")
    wait_for(lambda: Rollout.objects.get(pk=slow.pk).status == "running", 20, "the slow rollout to run")
    # Running but still in its reset: listed, with no step yet (live, then on a page opened anew).
    page.wait_for_selector(f"#live-steps-list .live-item:has-text('#{slow.pk}'):has-text('no step yet')", timeout=5_000)
    reloaded = page.context.new_page()
    reloaded.goto(page.url)
    reloaded.wait_for_selector(f"#live-steps-list .live-item:has-text('#{slow.pk}'):has-text('no step yet')", timeout=3_000)
    assert panel_ids(reloaded) == [f"#{slow.pk}"]
    page.wait_for_function(
        f"[...document.querySelectorAll('#live-steps-list .live-item strong')].map(n => n.textContent).join() === '#{slow.pk}'",
        timeout=10_000,
    )
    page.wait_for_selector("#live-steps-list .live-item:has-text('step ')", timeout=10_000)

    reloaded.reload()
    reloaded.wait_for_selector("#live-steps-list .live-item", timeout=10_000)
    assert panel_ids(reloaded) == [f"#{slow.pk}"]
    assert "step " in reloaded.locator("#live-steps-list").inner_text()

    wait_for(lambda: Rollout.objects.get(pk=slow.pk).is_finished, 40, "the slow rollout to finish")
    # The page watched live comes to rest as a reload shows it: no panel.
    page.wait_for_selector("#live-steps", state="hidden", timeout=10_000)
    reloaded.reload()
    assert not reloaded.locator("#live-steps").is_visible()
