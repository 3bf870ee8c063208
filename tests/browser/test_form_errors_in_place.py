"""In Chromium: a refused review decision and a refused audit show their reason beside the field with
what was typed still in it (the decision panel and the quality card swap themselves in place)."""
import pytest

from runs.models import Audit, RewardLabel
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.review.conftest import ENV_PY, bulk_run
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = "/tmp/wt-review-shots"


def test_refusals_show_beside_their_fields_and_keep_the_text(page, live_server, owner, reviewer, team):
    version = package_version(team, owner, "inplace", ENV_PY)
    rollout = bulk_run(team, owner, version, rewards=[1.0]).rollouts.get()

    log_in(page, live_server, "olivia", PASSWORD)
    page.goto(f"{live_server.url}/t/alpha/review/{rollout.pk}/")
    page.wait_for_selector("#replay.ready")
    page.keyboard.press("o")
    page.keyboard.type("zero")
    page.fill("#override-rationale", "the agent <b>cheated</b>")
    page.click("[data-decision=overridden]")
    page.wait_for_selector("#value-error")
    assert "must be a finite number" in page.locator("#value-error").inner_text()
    assert page.input_value("#override-value") == "zero"
    assert page.input_value("#override-rationale") == "the agent <b>cheated</b>"
    assert page.evaluate("document.activeElement.id") == "override-value"  # the field at fault, to correct
    page.screenshot(path=f"{SHOTS}/review-value-error.png")
    # Corrected in place, the override goes through (the panel's keys work again after the swap).
    page.fill("#override-value", "0.25")
    page.click("[data-decision=overridden]")
    page.wait_for_url("**/review/**")
    page.wait_for_function("() => !document.querySelector('#value-error')")
    assert RewardLabel.objects.filter(source="human", decision="overridden", value=0.25).exists()

    page.goto(f"{live_server.url}/t/alpha/environments/inplace/versions/1/")
    page.wait_for_selector("#audit-seeds")
    page.fill("#audit-seeds", "0-99999999999999999999")
    page.click("#quality-card .audit-form button[type=submit]")
    page.wait_for_selector("#audit-seeds-error")
    assert "is too large" in page.locator("#audit-seeds-error").inner_text()
    assert page.input_value("#audit-seeds") == "0-99999999999999999999"
    page.locator("#quality-card").screenshot(path=f"{SHOTS}/audit-seeds-error.png")
    assert not Audit.objects.exists()
