"""Browser tests drive the system Chromium through Playwright's sync API against a live server."""
import os
import shutil

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
]

# Playwright's sync API runs an event loop in this thread; Django's ORM calls from the test body are safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="module")
def browser():
    # Module-scoped: Playwright's sync API keeps an event loop running in this thread while it is
    # open, which would break async_to_sync in any later test.
    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium not found at {CHROMIUM}; install Debian's chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)  # lets wait_for_function evaluate its predicates; the CSP itself is tested in tests/studio
    pg = context.new_page()
    pg.set_default_timeout(10_000)
    yield pg
    context.close()


def log_in(page, server, username, password):
    """Log in through the login page; `server` is pytest-django's live_server or a base URL."""
    base = server if isinstance(server, str) else server.url
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
