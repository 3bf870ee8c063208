"""A new author creates an environment, edits env.py in the editor, commits two versions, and diffs them."""
import pytest

from environments.models import Environment
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _editor_append(page, text):
    page.click(".CodeMirror")
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


def test_author_edits_commits_two_versions_and_opens_the_diff(page, live_server, owner):
    log_in(page, live_server, "olivia", PASSWORD)
    page.click("text=New environment")
    page.fill("input[name=name]", "Coin Flip")
    page.click("button:has-text('Create')")
    page.wait_for_selector(".CodeMirror")
    assert page.locator(".filename").inner_text() == "env.py"

    _editor_append(page, "\n# first tweak\n")
    assert page.locator("#dirty-flag").is_visible()
    page.keyboard.press("Control+s")
    page.wait_for_selector("#save-status .flash.success")
    assert not page.locator("#dirty-flag").is_visible()

    page.fill("#commit-message", "First version")
    page.click("button:has-text('Commit version')")
    page.wait_for_url("**/versions/1/")
    assert "coin-flip@1" in page.content()

    page.goto(f"{live_server.url}/t/alpha/environments/coin-flip/")
    page.wait_for_selector(".CodeMirror")
    _editor_append(page, "# second tweak\n")
    page.click("#save-form button[type=submit]")
    page.wait_for_selector("#save-status .flash.success")
    page.fill("#commit-message", "Second version")
    page.click("button:has-text('Commit version')")
    page.wait_for_url("**/versions/2/")

    page.click("text=Diff with v1")
    page.wait_for_selector(".difffile")
    added = page.locator("pre.diff .add").all_inner_texts()
    assert any("# second tweak" in line for line in added), added
    env = Environment.objects.get(slug="coin-flip")
    assert [v.number for v in env.versions.order_by("number")] == [1, 2]
    assert "# second tweak" in env.versions.get(number=2).files["env.py"]
    assert "# second tweak" not in env.versions.get(number=1).files["env.py"]


def test_invalid_commit_shows_file_and_line_in_the_page(page, live_server, owner, environment):
    log_in(page, live_server, "olivia", PASSWORD)
    page.goto(f"{live_server.url}/t/alpha/environments/counter/?file=tasks.jsonl")
    page.wait_for_selector(".CodeMirror")
    page.evaluate("window.studioEditor.setValue('{\"id\": \"a\"}\\n{\"id\": \"a\"}\\n')")
    page.keyboard.press("Control+s")
    page.click(".CodeMirror")
    page.keyboard.press("Control+s")
    page.wait_for_selector("#save-status .flash.success")
    page.fill("#commit-message", "Duplicate ids")
    page.click("button:has-text('Commit version')")
    problems = page.wait_for_selector("#commit-problems")
    assert "tasks.jsonl:2" in problems.inner_text() and "duplicate" in problems.inner_text()
    assert not environment.versions.exists()


def test_conflicting_save_shows_both_texts_and_keeps_mine(page, live_server, owner, author, environment):
    from environments import services

    log_in(page, live_server, "olivia", PASSWORD)
    page.goto(f"{live_server.url}/t/alpha/environments/counter/")
    page.wait_for_selector(".CodeMirror")
    environment.draft.refresh_from_db()
    services.draft_save_file(environment=environment, actor=author, path="env.py", content="# arthur was here\n", expected_revision=environment.draft.revision)
    _editor_append(page, "# olivia's change\n")
    page.click("#save-form button[type=submit]")
    conflict = page.wait_for_selector(".conflict")
    text = conflict.inner_text()
    assert "arthur was here" in text and "olivia's change" in text
    # The difference first, as a diff: theirs removed, yours added; and the panel fits the window.
    assert page.locator(".conflict-diff .del", has_text="arthur was here").count() == 1
    assert page.locator(".conflict-diff .add", has_text="olivia's change").count() == 1
    assert conflict.bounding_box()["height"] <= page.viewport_size["height"]
    page.click("[data-conflict-take=mine]")
    page.wait_for_selector("#save-status .flash.success")
    environment.draft.refresh_from_db()
    assert "olivia's change" in environment.draft.files["env.py"]
