"""In Chromium: the compare page leads with the paired result and links both rollouts of each flip; the
run page's Suspicious rollouts panel shows each reason as text and links its rollout. Screenshots are
kept in the test's tmp_path (JUDGEMENT_SHOTS=dir keeps them there too)."""
import os
import re
from pathlib import Path

import pytest

from tests.browser.conftest import browser, log_in, page  # noqa: F401 - fixtures
from tests.conftest import PASSWORD
from tests.quality.test_paired_ab import YES_ENV, played_run
from tests.quality.test_transcript_scanner import WORKSHOP_ENV, scanned_run
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shot(page, tmp_path, name):
    folder = Path(os.environ.get("JUDGEMENT_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_compare_page_and_suspicious_panel_in_chromium(page, live_server, team, owner, tmp_path):
    version = package_version(team, owner, "say-yes", YES_ENV, max_steps=1)
    run_a = played_run(team, owner, version, fails={2, 3, 4}, name="a-agent")
    run_b = played_run(team, owner, version, fails={0, 1, 4}, name="b-agent")
    log_in(page, live_server, "olivia", PASSWORD)
    page.goto(f"{live_server.url}/t/{team.slug}/quality/compare/?runs={run_a.pk},{run_b.pk}")
    paired = page.locator("#ab-paired")
    assert "p = 1.0000" in paired.locator("[data-figure=mcnemar]").inner_text()
    assert page.locator("#ab-flips tbody tr").count() == 4
    assert paired.bounding_box()["y"] < page.locator("#ab-summary").bounding_box()["y"]
    shot(page, tmp_path, "compare")
    page.locator("#ab-flips tbody tr").first.locator("td").nth(3).get_by_role("link").click()
    page.wait_for_url("**/rollouts/*/")

    workshop = package_version(team, owner, "workshop", WORKSHOP_ENV, tasks=[{"id": "t1", "a": 2, "b": 3}], max_steps=20)
    writer = scanned_run(team, owner, workshop, "writer", seeds=(0, 1, 2))
    page.goto(f"{live_server.url}/t/{team.slug}/runs/{writer.pk}/")
    panel = page.locator("#suspicious-rollouts")
    panel.wait_for()
    assert "<b>x</b>/junit.xml" in panel.inner_text()  # shown as text, not markup
    assert panel.locator("b", has_text=re.compile(r"^x$")).count() == 0  # no element made of the agent's markup
    panel.scroll_into_view_if_needed()
    shot(page, tmp_path, "run-suspicious")
    panel.get_by_role("link", name=f"#{writer.rollouts.order_by('id').first().pk}").click()
    page.wait_for_url("**/rollouts/*/")
