"""A run page watched live ends equal to the same page reloaded, field by field (real worker, real
websocket, Chromium), and an environment's error text stays text on the live page (issue 15)."""
import pytest

from runs import services
from runs.models import Run
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.processes import asgi_server, celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

XSS = """<img src=x onerror="window.__xss=1"> said "hi" & 'bye'"""
MIXED_ENV = '''
import time

class Env:
    action_space = {"type": "discrete", "n": 3}

    def reset(self, task, seed):
        self.mode, self.n = task["mode"], 0
        return {"n": 0}

    def step(self, action):
        time.sleep(0.15)
        self.n += 1
        if self.mode == "crash":
            raise RuntimeError(%r)
        return {"n": self.n}, 0.25, self.n >= 4, False, {}

    def verify(self):
        return (1.0 if self.mode == "win" else 0.0), "mode " + self.mode
''' % XSS
TASKS = [
    {"id": "win", "mode": "win", "difficulty": 1},
    {"id": "lose", "mode": "lose", "difficulty": 1},
    {"id": "crash", "mode": "crash", "difficulty": 2},
]

# Everything a viewer reads on the run page, as text: figures, by-difficulty rows, rollout rows.
READ_PAGE = """() => ({
  status: document.getElementById("run-status").textContent.trim(),
  summary: document.getElementById("summary-stats").innerText,
  byDifficulty: document.getElementById("by-difficulty").innerText,
  rows: [...document.querySelectorAll("#rollout-rows tr")].map((tr) => [tr.id, tr.innerText, tr.querySelector(".error-cell span")?.title ?? ""]),
  cancel: !!document.querySelector("[data-live-only]"),
  images: document.querySelectorAll("#run-body img").length,
  xss: window.__xss ?? null,
})"""


def test_a_run_watched_live_equals_the_reloaded_page_and_error_text_stays_text(
    page, celery_worker, asgi_server, team, owner
):
    version = package_version(team, owner, "mixed-live", MIXED_ENV, tasks=TASKS, limits={"step_timeout_s": 5})
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    log_in(page, asgi_server, "olivia", PASSWORD)
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids="all", seeds=[0, 1, 2])

    page.goto(f"{asgi_server}/t/alpha/runs/{run.pk}/")
    assert page.locator("[data-live-only]").count() == 1  # Cancel while the run is live
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "finished", 60, "the run to finish")
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'finished'", timeout=15_000)
    page.wait_for_function("!document.querySelector('#rollout-rows .badge.running, #rollout-rows .badge.queued')", timeout=15_000)
    live = page.evaluate(READ_PAGE)

    page.reload()
    reloaded = page.evaluate(READ_PAGE)
    assert live == reloaded
    assert live["status"] == "finished" and live["cancel"] is False
    assert "9/9" in live["summary"] and "33%" in live["summary"]
    # The environment's error text is shown as text, quotes and all, and never ran.
    crash_rows = [row for row in live["rows"] if "crash" in row[1]]
    assert len(crash_rows) == 3 and all('<img src=x onerror="window.__xss=1">' in row[2] for row in crash_rows)
    assert all("<img src=x" in row[1] for row in crash_rows)
    assert live["images"] == 0 and live["xss"] is None


HELD_SOCKET = """
window.__RealWS = window.WebSocket;
window.WebSocket = function (url) {
  const held = { close() { if (held.ws) held.ws.close(); } };
  const wait = setInterval(() => {
    if (!window.__release) return;
    clearInterval(wait);
    held.ws = new window.__RealWS(url);
    for (const k of ["onopen", "onmessage", "onclose"]) held.ws[k] = (e) => held[k] && held[k](e);
  }, 50);
  return held;
};
"""


def test_a_page_opened_after_rollouts_finished_unseen_reconciles_on_connect(page, asgi_server, team, owner):
    """No worker here: the rows finish in the database while the page's socket is not yet open."""
    from runs.models import Rollout

    version = package_version(team, owner, "unseen", MIXED_ENV, tasks=TASKS[:1])
    agent = services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0, 1], enqueue=False)
    log_in(page, asgi_server, "olivia", PASSWORD)
    # Hold the page's websocket back until released; finish a rollout meanwhile, with no event.
    page.add_init_script(HELD_SOCKET)
    page.goto(f"{asgi_server}/t/alpha/runs/{run.pk}/")
    first = run.rollouts.order_by("id")[0]
    assert page.locator(f"#rollout-{first.pk} .badge.queued").count() == 1
    Rollout.objects.filter(pk=first.pk).update(status="succeeded", verifier_reward=1.0, total_reward=1.0, step_count=4)
    page.evaluate("window.__release = true")
    page.wait_for_selector(f"#rollout-{first.pk} .badge.succeeded", timeout=15_000)
    assert "1/2" in page.locator("#summary-stats [data-k=progress]").inner_text()
