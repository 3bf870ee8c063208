"""In Chromium: runs are compared from the runs list (chart and table), and a run cancelled from its page
ends with its figures, controls and rows equal to a reload (real worker)."""
import pytest

from runs import services
from runs.models import Rollout, Run
from tests.browser.conftest import log_in
from tests.browser.test_live_equals_reload import READ_PAGE
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
        return {"n": 0}

    def step(self, action):
        time.sleep(0.2)
        self.n += 1
        return {"n": self.n}, 0.1, self.n >= 10, False, {}

    def verify(self):
        return 1.0, "counted to %d" % self.n
"""


def test_two_runs_ticked_on_the_list_are_compared_task_by_task(page, asgi_server, team, owner):
    version = package_version(team, owner, "cmp-browser", SLOW_ENV, tasks=[{"id": "a"}, {"id": "b"}])
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    runs = [services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0, 1], enqueue=False) for _ in range(2)]
    for run, statuses in zip(runs, (["succeeded", "failed", "failed", "failed"], ["succeeded"] * 4)):
        for rollout, status in zip(run.rollouts.order_by("task_id", "seed"), statuses):
            Rollout.objects.filter(pk=rollout.pk).update(status=status, total_reward=1.0 if status == "succeeded" else 0.0)
    log_in(page, asgi_server, "olivia", PASSWORD)
    page.goto(f"{asgi_server}/t/alpha/runs/")
    for run in runs:
        page.check(f"input[name=run][value='{run.pk}']")
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector("#comparison")
    # The chart is drawn once the vendored Chart.js has loaded (a deferred script: it may come after the table).
    page.wait_for_function("() => !!window.Chart && !!Chart.getChart(document.getElementById('compare-chart'))")
    row = page.locator("#comparison tr[data-task='a']").inner_text()
    # The list shows the newest run first, so it is the base the older one is compared with.
    assert "50%" in row and "100%" in row and "-50 pts" in row


def test_a_run_cancelled_from_its_page_ends_equal_to_a_reload(page, celery_worker, asgi_server, team, owner):
    version = package_version(team, owner, "cancel-browser", SLOW_ENV, tasks=[{"id": "t1"}], limits={"step_timeout_s": 5})
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    log_in(page, asgi_server, "olivia", PASSWORD)
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=list(range(12)))
    page.goto(f"{asgi_server}/t/alpha/runs/{run.pk}/")
    page.wait_for_selector("#rollout-rows .badge.running", timeout=20_000)
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("[data-live-only] button")
    page.wait_for_selector("#run-status.badge.cancelled")
    assert page.locator("[data-live-only]").count() == 0
    wait_for(lambda: not Run.objects.get(pk=run.pk).rollouts.filter(status__in=["queued", "running"]).exists(), 30, "rollouts to stop")
    import time

    seen = set()
    for _ in range(20):  # an ended rollout stays ended
        seen |= set(Run.objects.get(pk=run.pk).rollouts.values_list("status", flat=True))
        time.sleep(0.1)
    assert seen == {"cancelled"}, seen
    page.wait_for_function("!document.querySelector('#rollout-rows .badge.running, #rollout-rows .badge.queued')", timeout=15_000)
    # The last throttled summary counts nothing queued or running (it comes, however loaded the machine).
    page.wait_for_function("document.getElementById('summary-stats').dataset.pending === '0'", timeout=15_000)
    live = page.evaluate(READ_PAGE)
    page.reload()
    assert page.evaluate(READ_PAGE) == live
    assert "cancelled" in live["summary"] and live["status"] == "cancelled" and not live["cancel"]
