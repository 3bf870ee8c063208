"""In Chromium, with a real worker: the Audit button on a version page queues an audit, the card
fills in by itself, and its red `claim` line leads to the rollout whose replay shows the hack."""
import pytest
from playwright.sync_api import expect

from tests.quality.audits import two_tasks
from tests.browser.conftest import browser, log_in, page  # noqa: F401 - fixtures
from tests.conftest import PASSWORD
from tests.processes import asgi_server, celery_queue, celery_worker  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_audit_button_fills_the_card_and_a_flag_leads_to_its_replay(page, celery_worker, asgi_server, make_version, team):
    version = make_version("guess_claim", extra=two_tasks())
    log_in(page, asgi_server, "olivia", PASSWORD)
    page.goto(f"{asgi_server}/t/{team.slug}/environments/{version.environment.slug}/versions/1/")
    card = page.locator("#quality-card")
    card.get_by_text("Not audited yet").wait_for()
    page.fill("#audit-seeds", "0")
    page.click("#quality-card button[type=submit]")
    page.get_by_text("Audit running").wait_for()
    claim = page.locator("#quality-card li[data-check='probe:claim']")
    claim.wait_for(timeout=180_000)
    assert "red" in claim.get_attribute("class") and "the verifier rewards it" in claim.inner_text()
    assert page.locator("#quality-card [data-audit-status]").inner_text() == "Flagged"
    assert "green" in page.locator("#quality-card li[data-check='determinism']").get_attribute("class")
    claim.get_by_role("link").click()
    page.wait_for_url("**/rollouts/*/")
    assert "probe-claim" in page.locator("main").inner_text()
    assert "says its answer is correct" in page.locator("#replay-verifier-reason").inner_text()
    # Its claims rotate across episodes (this one may lead with another kind): the action that ended it says "correct".
    scrubber = page.locator("#replay-scrubber")
    expect(scrubber).not_to_have_attribute("max", "-1")
    scrubber.fill(scrubber.get_attribute("max"))
    expect(page.locator("#replay-action")).to_contain_text("correct")
    page.goto(f"{asgi_server}/t/{team.slug}/environments/")
    assert page.locator(".envcard [data-audit-status='flagged']").count() == 1
