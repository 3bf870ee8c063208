"""A reviewer works through three rollouts with the keyboard alone; the export holds the decisions."""
import json

import pytest

from runs import services
from runs.models import LabelDecision, RewardLabel
from runs.tasks import execute_rollout
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.runs.rollout_factories import demo_agent_code, demo_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def finished_run(team, owner):
    version = demo_version(team, owner, "guess_number")
    agent = services.agent_create(team=team, actor=owner, name="bisect", kind="scripted", code=demo_agent_code("guess_number"))
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=["t1"], seeds=[0, 1, 2])
    for r in run.rollouts.order_by("id"):
        execute_rollout(r.pk)
    return run


def test_reviewer_decides_three_rollouts_by_keyboard_and_exports_them(page, live_server, owner, reviewer, finished_run):
    ids = list(finished_run.rollouts.order_by("id").values_list("id", flat=True))
    log_in(page, live_server, "rita", PASSWORD)
    page.goto(f"{live_server.url}/t/alpha/review/")
    page.keyboard.press("Tab")  # nothing focused yet; the queue link is one click for newcomers
    page.click("#start-review")
    page.wait_for_selector("#replay.ready")
    assert page.url.endswith(f"/review/{ids[0]}/")

    page.keyboard.press("ArrowRight")
    page.evaluate("window.__samePage = true")
    page.keyboard.press("a")
    page.wait_for_url(f"**/review/{ids[1]}/**")
    page.wait_for_selector(f"#replay.ready[data-rollout='{ids[1]}']")
    # The next item came in place, without a page load, with the queue's progress and the decision said.
    assert page.evaluate("window.__samePage") is True
    assert "(2 left)" in page.locator(".crumbs").inner_text()
    assert f"Rollout #{ids[0]}: approved" in page.locator("#messages").inner_text()
    page.keyboard.press("r")
    page.wait_for_url(f"**/review/{ids[2]}/**")
    page.wait_for_selector(f"#replay.ready[data-rollout='{ids[2]}']")
    assert page.evaluate("window.__samePage") is True
    page.keyboard.press("o")
    page.keyboard.type("0.25")
    page.keyboard.press("Enter")
    page.keyboard.type("solved, but slower than the task allows")
    page.keyboard.press("Control+Enter")
    page.wait_for_url(f"{live_server.url}/t/alpha/review/")
    assert "queue is empty" in page.content()

    decisions = dict(RewardLabel.objects.filter(source="human").values_list("rollout_id", "decision"))
    assert decisions == {ids[0]: LabelDecision.APPROVED, ids[1]: LabelDecision.REJECTED, ids[2]: LabelDecision.OVERRIDDEN}

    response = page.request.get(f"{live_server.url}/t/alpha/runs/{finished_run.pk}/export.jsonl?decision=approved")
    lines = [json.loads(line) for line in response.text().splitlines()]
    exported = {line["rollout_id"] if "rollout_id" in line else line["id"]: line for line in lines}
    assert set(exported) == {ids[0], ids[2]}
    assert exported[ids[2]]["label"]["value"] == 0.25 and exported[ids[2]]["label"]["decision"] == "overridden"
    assert all(line["steps"] for line in lines)
