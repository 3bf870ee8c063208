"""The training gate in Chromium, as an owner meets it: turn it on in the team settings, see the flagged
version's card say what is blocked, try New run (refused in place), override with a reason, and run."""
import pytest

from runs.models import Run
from runs.quality.models import Audit, AuditStatus
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.runs.rollout_factories import demo_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOT = "/tmp/training_gate_card.png"


def test_an_owner_gates_a_flagged_version_then_overrides_it_with_a_reason(page, live_server, team, owner):
    version = demo_version(team, owner, "guess_number")
    audit = Audit.objects.create(team=team, environment_version=version, status=AuditStatus.FLAGGED, seeds=[0],
                                 report={"status": "flagged", "determinism": {"pairs": 0, "divergent": []},
                                         "lines": [{"id": "leak", "check": "leak", "level": "red", "rollout": None,
                                                    "text": "A hidden answer reaches the agent."}]})
    log_in(page, live_server, owner.username, PASSWORD)
    page.goto(f"{live_server.url}/t/{team.slug}/settings/")
    assert "Off:" in page.locator("#training-gate-settings").inner_text()
    page.check("#training-gate-settings input[name=enabled]")
    page.click("#training-gate-settings button:has-text('Save')")
    page.wait_for_selector("text=Training gate on")
    assert "On:" in page.locator("#training-gate-settings").inner_text()

    page.goto(f"{live_server.url}/t/{team.slug}/environments/{version.environment.slug}/versions/{version.number}/")
    page.wait_for_selector("#training-gate")
    assert "Training gate: blocked." in page.locator("#training-gate").inner_text()
    page.screenshot(path=SCREENSHOT, full_page=True)

    # New run is refused in place, naming the version and its audit; nothing is queued.
    page.goto(f"{live_server.url}/t/{team.slug}/runs/new/?version={version.label}")
    page.fill("input[name=seeds]", "0-1")
    page.click("button:has-text('Start run')")
    page.wait_for_selector(f"text=is flagged by its audit {audit.pk}")
    assert page.input_value("input[name=seeds]") == "0-1" and not Run.objects.exists()

    page.goto(f"{live_server.url}/t/{team.slug}/environments/{version.environment.slug}/versions/{version.number}/")
    page.wait_for_selector("#gate-reason")
    page.fill("#gate-reason", "the leak is a fixture's <i>decoy</i>, checked by hand")
    page.click("button:has-text('Override the gate')")
    page.wait_for_selector("text=Training gate overridden")
    said = page.locator("#training-gate").inner_text()
    assert "the leak is a fixture's <i>decoy</i>, checked by hand" in said and owner.username in said

    page.goto(f"{live_server.url}/t/{team.slug}/runs/new/?version={version.label}")
    page.fill("input[name=seeds]", "0")
    page.click("button:has-text('Start run')")
    page.wait_for_url("**/runs/*/")
    assert Run.objects.count() == 1
