"""New run offers the chosen version's own agent (its agent.py or `[quality] oracle`), in Chromium:
choosing the version reloads the form with that choice, and the run it starts runs the package's code."""
import pytest

from runs.models import Run
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.runs.rollout_factories import IDLE_ENV_PY, demo_version, package_version, play_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOT = "/tmp/new_run_version_agent.png"


def agent_options(page) -> list[str]:
    return page.locator("select[name=agent] option").all_inner_texts()


def test_new_run_offers_and_runs_the_versions_own_agent(page, live_server, team, owner):
    version = demo_version(team, owner, "guess_number")
    bare = package_version(team, owner, "bare", IDLE_ENV_PY)
    log_in(page, live_server, owner.username, PASSWORD)
    page.goto(f"{live_server.url}/t/{team.slug}/runs/new/?version={bare.label}")
    # A version that ships no agent does not offer one.
    assert agent_options(page) == ["Random (built in)"]
    # Choosing another version loads the form again, now with that version's agent.
    with page.expect_navigation():
        page.select_option("select[name=version]", version.label)
    assert page.url.endswith("?version=guess-number%401")
    assert "This version's agent (agent.py, scripted)" in agent_options(page)
    page.select_option("select[name=agent]", "version")
    page.fill("input[name=tasks]", "t1,t3")
    page.fill("input[name=seeds]", "0-1")
    page.screenshot(path=SCREENSHOT, full_page=True)
    page.click("button:has-text('Start run')")
    page.wait_for_url("**/runs/*/")
    run = Run.objects.select_related("agent").get()
    assert (run.agent.name, run.agent.kind) == ("guess-number-oracle", "scripted")
    assert {rollout.status for rollout in play_run(run)} == {"succeeded"}
    page.reload()
    assert "agent guess-number-oracle (scripted)" in page.locator("main").inner_text()
    assert page.locator("[data-k=success-rule]").is_visible()


def test_choosing_the_versions_agent_for_a_version_without_one_is_refused_in_place(page, live_server, team, owner):
    """Without a version in the query the choice is offered; a version that ships none is refused
    beside the agent field, keeping what was typed."""
    bare = package_version(team, owner, "bare", IDLE_ENV_PY)
    log_in(page, live_server, owner.username, PASSWORD)
    page.goto(f"{live_server.url}/t/{team.slug}/runs/new/")
    page.select_option("select[name=agent]", "version")
    page.fill("input[name=seeds]", "3-5")
    # The version select reloads the page on change: set it without the change event, as a typed POST would.
    page.evaluate(f"document.querySelector('select[name=version]').value = '{bare.label}'")
    page.click("button:has-text('Start run')")
    page.wait_for_selector("small.error")
    assert "bare@1 ships no agent" in page.locator("small.error").inner_text()
    assert page.input_value("input[name=seeds]") == "3-5"
    assert not Run.objects.exists()
