"""In Chromium: a refused decision says why on the review screen (no reward to approve, an override
without a rationale), and nothing is recorded."""
import pytest

from runs.models import RewardLabel, Rollout, RolloutStatus
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.review.conftest import ENV_PY, bulk_run
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_refused_decisions_say_why_on_the_review_screen(page, live_server, owner, reviewer, team):
    version = package_version(team, owner, "refusals", ENV_PY)
    run = bulk_run(team, owner, version, rewards=[1.0, 1.0])
    errored, proposed = run.rollouts.order_by("id")
    Rollout.objects.filter(pk=errored.pk).update(status=RolloutStatus.ERRORED, verifier_reward=None, error="env crashed")
    RewardLabel.objects.filter(rollout=errored).delete()  # an errored rollout never got a proposal

    log_in(page, live_server, "rita", PASSWORD)
    page.goto(f"{live_server.url}/t/alpha/review/{errored.pk}/")
    page.wait_for_selector("#replay.ready")
    page.keyboard.press("a")
    page.wait_for_selector("#decision-error .flash.error")
    assert "no reward to approve" in page.locator("#decision-error").inner_text()

    page.goto(f"{live_server.url}/t/alpha/review/{proposed.pk}/")
    page.wait_for_selector("#replay.ready")
    page.keyboard.press("o")
    page.keyboard.type("0.5")
    page.click("[data-decision=overridden]")
    page.wait_for_selector("#rationale-error")  # beside the rationale, the value still typed
    assert "needs a rationale" in page.locator("#rationale-error").inner_text()
    assert page.input_value("#override-value") == "0.5"
    assert not RewardLabel.objects.filter(source="human").exists()
