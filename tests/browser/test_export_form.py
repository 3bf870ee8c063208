"""The export form on a run page: a filter that matches nothing says so; a match downloads Parquet."""
import pyarrow.parquet as pq
import pytest

from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.review.conftest import make_run, version  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_export_form_says_when_nothing_matches_and_downloads_parquet(page, live_server, owner, make_run, tmp_path):  # noqa: F811
    run = make_run([1.0, 0.0], steps=2)
    log_in(page, live_server, "olivia", PASSWORD)
    page.goto(f"{live_server.url}/t/alpha/runs/{run.pk}/")
    form = page.locator("form.export-form")
    form.locator("select[name=decision]").select_option("rejected")
    form.locator("input[name=min_reward]").fill("0.5")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("#export-count")
    assert "0 rollouts match (rejected, reward at least 0.5)" in page.inner_text("#export-count")
    page.screenshot(path=str(tmp_path / "export-empty.png"))
    page.click("text=Back")

    form = page.locator("form.export-form")
    form.locator("select[name=decision]").select_option("all")
    form.locator("select[name=format]").select_option("chat")
    form.locator("select[name=file]").select_option("parquet")
    page.screenshot(path=str(tmp_path / "export-form.png"))
    with page.expect_download() as download:
        form.locator("button[type=submit]").click()
    assert download.value.suggested_filename == f"run-{run.pk}-all-chat.parquet"
    path = tmp_path / "export.parquet"
    download.value.save_as(path)
    assert pq.read_table(path).num_rows == 2
