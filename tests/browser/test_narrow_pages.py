"""Every page a member reaches by following links reads at 390 px (a phone held upright) without sideways
scrolling: the nav collapses, tables stack or scroll inside their own box, forms and the editor fit."""
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Error as PlaywrightError

from runs import services as run_services
from runs.review import services as review_services
from tests.browser.conftest import log_in
from tests.conftest import PASSWORD
from tests.runs.rollout_factories import package_version, play_run, random_agent
from tests.studio.test_page_crawl import ENV_PY, SKIP

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH = 390
MAX_PAGES = 60
# What a page is wider than the screen by, if anything, and which element sticks out furthest.
OVERFLOW_JS = """() => {
  const width = document.documentElement.clientWidth;
  let widest = null, right = width;
  for (const el of document.querySelectorAll('body *')) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right > right + 1 && getComputedStyle(el).position !== 'fixed') {
      let inside = false;  // an element inside a box that scrolls on its own does not widen the page
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        const o = getComputedStyle(p).overflowX;
        if (o === 'auto' || o === 'scroll' || o === 'hidden') { inside = true; break; }
      }
      if (!inside) { right = box.right; widest = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : ''); }
    }
  }
  return {scroll: document.documentElement.scrollWidth, width, widest};
}"""


@pytest.fixture
def studio_data(team, owner, reviewer):
    version = package_version(team, owner, "narrow", ENV_PY, tasks=[{"id": "t1", "difficulty": 1}, {"id": "t2", "difficulty": 2}])
    run = run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1])
    rollouts = play_run(run)
    review_services.label_decide(rollout=rollouts[0], actor=reviewer, decision="approved", rationale="fine")
    review_services.annotation_add(rollout=rollouts[1], actor=reviewer, text="look", tags=["env-bug"])
    again = run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1])
    play_run(again)
    return run, again


def test_every_page_fits_390_px_without_sideways_scroll(browser, live_server, studio_data, owner):
    context = browser.new_context(viewport={"width": WIDTH, "height": 800}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    run, again = studio_data
    page.goto(f"{live_server.url}/accounts/login/")  # the one page a visitor sees before logging in
    found = page.evaluate(OVERFLOW_JS)
    wide = [f"/accounts/login/: {found['scroll']} px wide ({found['widest']})"] if found["scroll"] > found["width"] + 1 else []
    log_in(page, live_server, owner.username, PASSWORD)
    # Pages no link reaches from this data's home page: a new team, two runs compared.
    seen, queue = set(), ["/", "/teams/new/", f"/t/alpha/runs/compare/?runs={run.pk},{again.pk}"]
    while queue and len(seen) < MAX_PAGES:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            response = page.goto(live_server.url + path)
        except PlaywrightError as exc:  # a link to a file download is not a page
            if "Download is starting" in str(exc):
                continue
            raise
        if response is None or response.status >= 400 or "text/html" not in response.headers.get("content-type", ""):
            continue
        found = page.evaluate(OVERFLOW_JS)
        if found["scroll"] > found["width"] + 1:
            wide.append(f"{path}: {found['scroll']} px wide ({found['widest']})")
        for href in page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)"):
            url = urlsplit(href)
            if url.netloc != urlsplit(live_server.url).netloc or url.path.startswith(SKIP) or "export" in url.path:
                continue
            queue.append(url.path + (f"?{url.query}" if url.query else ""))
    context.close()
    assert len(seen) > 20, seen
    assert not wide, "\n".join(wide)
