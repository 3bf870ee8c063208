"""Every page a member can reach by following links, fetched as is and with hostile query strings:
none answers with a server error."""
import re
from urllib.parse import urljoin, urlsplit

import pytest

from runs import services as run_services
from runs.review import services as review_services
from tests.conftest import login
from tests.runs.rollout_factories import package_version, play_run, random_agent

ENV_PY = """
class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        return {"seed": seed, "text": "<b>bold</b> & \\"quotes\\""}

    def step(self, action):
        return {"moved": action}, 1.0, True, False, {"why": "<script>x</script>"}

    def verify(self):
        return 1.0, "done"
"""
BAD_QUERIES = [
    "offset=-1", "offset=99999999999999999999", "limit=-5", "page=abc", "page=-1", "page=99999999999",
    "after=-5", "after=abc", "run=abc", "run=-1", "agent=1e5", "version=1e400", "min_reward=nan",
    "max_reward=inf", "min_reward=-inf", "status=%F0%9F%98%80", "status=nope", "task=%00", "sort=%27%3Bdrop",
    "runs=1,,2,abc", "runs=" + ",".join(["1"] * 500), "outcome=%E2%80%AE", "environment=" + "x" * 5000, "q=%ED%A0%80",
]
SKIP = ("/accounts/logout/", "/admin/", "/static/", "/api/v1/", "/favicon.ico")
MAX_PAGES = 120


@pytest.fixture
def member_client(team, owner, reviewer):
    version = package_version(team, owner, "crawl", ENV_PY, tasks=[{"id": "t1", "difficulty": 1}, {"id": "t2", "difficulty": 2}])
    run = run_services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1])
    rollouts = play_run(run)
    review_services.label_decide(rollout=rollouts[0], actor=reviewer, decision="approved", rationale="fine")
    review_services.annotation_add(rollout=rollouts[1], actor=reviewer, text="look", tags=["env-bug"])
    return login(owner)


def links(html: str, base: str) -> set[str]:
    found = set()
    for href in re.findall(r'href="([^"#]+)', html):
        url = urlsplit(urljoin(base, href.replace("&amp;", "&")))
        if url.netloc not in ("", "testserver") or url.path.startswith(SKIP):
            continue
        found.add(url.path + (f"?{url.query}" if url.query else ""))
    return found


@pytest.mark.django_db(transaction=True)
def test_every_linked_page_and_bad_query_strings_answer_without_a_server_error(member_client):
    seen, queue, errors = set(), ["/"], []
    while queue and len(seen) < MAX_PAGES:
        url = queue.pop(0)
        if url in seen:
            continue
        seen.add(url)
        response = member_client.get(url, follow=True)
        if response.status_code >= 500:
            errors.append(f"{url} -> {response.status_code}")
            continue
        if "text/html" in response.get("Content-Type", ""):
            queue.extend(sorted(links(response.content.decode(), url) - seen))
    pages = {urlsplit(url).path for url in seen}
    assert len(pages) > 15, sorted(pages)
    for path in sorted(pages):
        for query in BAD_QUERIES:
            response = member_client.get(f"{path}?{query}")
            if response.status_code >= 500:
                errors.append(f"{path}?{query} -> {response.status_code}")
    assert not errors, "\n".join(errors)
