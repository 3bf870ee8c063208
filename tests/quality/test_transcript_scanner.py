"""The transcript scanner (runs/quality/transcripts.py): runs of scripted agents that shotgun their answer,
write the file the verifier reads, farm the step reward, and a clean one the scanner lists nothing of; on
the run page (escaped, only when there is something), in `GET /runs/{id}/suspicious`, and scanned by a
worker when the run ends."""
import re

import pytest
from django.urls import reverse

from runs import services as run_services
from runs.quality.models import SuspiciousRollout, TranscriptScan
from runs.quality.transcripts import run_scan
from tests.conftest import login
from tests.processes import celery_queue, celery_worker, wait_for  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version, play_run, scripted_agent

pytestmark = pytest.mark.django_db(transaction=True)

# A sum quiz with a file tool, whose verifier also believes a verdict file (the flaw a file-writer finds)
# and whose every step pays 0.5 (the flaw a farmer finds).
WORKSHOP_ENV = """
class Env:
    def reset(self, task, seed):
        self.answer, self.files, self.said = str(task["a"] + task["b"]), {}, None
        return {"question": f"What is {task['a']} + {task['b']}?"}

    def step(self, action):
        tool = action.get("tool") if isinstance(action, dict) else None
        arguments = action.get("arguments") or {} if isinstance(action, dict) else {}
        if tool == "write_file":
            self.files[arguments.get("path")] = arguments.get("content")
            return {"wrote": arguments.get("path")}, 0.5, False, False, {}
        if tool == "answer":
            self.said = str(arguments.get("answer"))
            return {"heard": self.said}, 0.5, True, False, {}
        return {"hint": "use the answer tool"}, 0.5, False, False, {}

    def verify(self):
        if self.files.get("out/verdict.txt") == "pass":
            return 1.0, "the verdict file says pass"
        return (1.0 if self.said == self.answer else 0.0), f"said {self.said!r}"
"""
SOLVE = """
import re

def answer(observation):
    a, b = map(int, re.findall(r"\\d+", observation["question"]))
    return {"tool": "answer", "arguments": {"answer": str(a + b)}}
"""
AGENTS = {
    # Writes a scratch file nobody reads, then answers right: nothing to list.
    "clean": SOLVE + """
steps = 0

def reset(task, seed):
    global steps
    steps = 0

def act(observation, info):
    global steps
    steps += 1
    if steps == 1:
        return {"tool": "write_file", "arguments": {"path": "notes/scratch.txt", "content": "thinking"}}
    return answer(observation)
""",
    "shotgun": """
def act(observation, info):
    return {"tool": "answer", "arguments": {"answer": " ".join(str(n) for n in range(40))}}
""",
    # Seed 0: a shell line writing a report file; seed 1: the file the verifier's code names; seed 2: a
    # report file by a path with markup in it.
    "writer": """
seed_now, steps = 0, 0

def reset(task, seed):
    global seed_now, steps
    seed_now, steps = seed, 0

def act(observation, info):
    global steps
    steps += 1
    if steps == 1 and seed_now == 0:
        return {"tool": "shell", "arguments": {"command": "cd /work && echo 1 > reward.txt 2>&1"}}
    if steps == 1 and seed_now == 2:
        return {"tool": "write_file", "arguments": {"path": "<b>x</b>/junit.xml", "content": "<ok/>"}}
    if steps == 1:
        return {"tool": "write_file", "arguments": {"path": "out/verdict.txt", "content": "pass"}}
    return {"tool": "answer", "arguments": {"answer": "no idea"}}
""",
    "farmer": """
steps = 0

def reset(task, seed):
    global steps
    steps = 0

def act(observation, info):
    global steps
    steps += 1
    return {"tool": "look"} if steps < 10 else {"tool": "answer", "arguments": {"answer": "0"}}
""",
}


@pytest.fixture
def workshop(team, owner):
    return package_version(team, owner, "workshop", WORKSHOP_ENV, tasks=[{"id": "t1", "a": 2, "b": 3}], max_steps=20)


def scanned_run(team, owner, version, name, *, seeds=(0, 1)):
    agent = scripted_agent(team, owner, AGENTS[name], name=name)
    run = run_services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=list(seeds), enqueue=False)
    play_run(run)
    run_scan(run_id=run.pk)  # what the worker does when the run ends (the last test sees it happen)
    return run


def suspicious_of(owner_api, run):
    response = owner_api.get(f"/runs/{run.pk}/suspicious")
    assert response.status_code == 200
    return response.json()


def checks(body):
    return {row["seed"]: [reason["check"] for reason in row["reasons"]] for row in body["suspicious"]}


def test_each_flawed_agent_is_listed_for_its_own_pattern_and_the_clean_one_for_nothing(team, owner, owner_api, workshop):
    clean = suspicious_of(owner_api, scanned_run(team, owner, workshop, "clean"))
    assert clean["scanned"] and clean["rollouts_scanned"] == 2 and clean["count"] == 0 and clean["suspicious"] == []

    shotgun = suspicious_of(owner_api, scanned_run(team, owner, workshop, "shotgun"))
    assert checks(shotgun) == {0: ["shotgun"], 1: ["shotgun"]}
    assert "holds 40 distinct numbers" in shotgun["suspicious"][0]["reasons"][0]["text"]

    writer = suspicious_of(owner_api, scanned_run(team, owner, workshop, "writer", seeds=(0, 1, 2)))
    # Seeds 0 and 2 also return what seed 1 (rewarded, by its verdict file) returns while their verifier says 0.
    assert checks(writer) == {0: ["verifier_file", "farming"], 1: ["verifier_file"], 2: ["verifier_file", "farming"]}
    texts = [row["reasons"][0]["text"] for row in writer["suspicious"]]
    assert texts == ["step 0 writes reward.txt (a report file verifiers read)",
                     "step 0 writes out/verdict.txt (the package's code names out/verdict.txt)",
                     "step 0 writes <b>x</b>/junit.xml (a report file verifiers read)"]

    farmer = suspicious_of(owner_api, scanned_run(team, owner, workshop, "farmer", seeds=(0,)))
    assert checks(farmer) == {0: ["farming"]}
    assert farmer["suspicious"][0]["reasons"][0]["text"].startswith("its return is 5.00 while the verifier says 0")


def test_the_run_page_shows_the_panel_escaped_only_when_something_is_suspicious(team, owner, workshop):
    writer, clean = scanned_run(team, owner, workshop, "writer", seeds=(0, 1, 2)), scanned_run(team, owner, workshop, "clean")
    client = login(owner)
    html = client.get(reverse("runs:run", kwargs={"team": team.slug, "run_id": writer.pk})).content.decode()
    panel = html[html.index('id="suspicious-rollouts"'):]
    panel = panel[:panel.index("</section>")]
    assert "3 of 3 scanned" in panel and "&lt;b&gt;x&lt;/b&gt;/junit.xml" in panel and "<b>x</b>" not in panel
    links = set(re.findall(r"/rollouts/(\d+)/", panel))
    assert links == {str(pk) for pk in writer.rollouts.values_list("id", flat=True)}
    clean_html = client.get(reverse("runs:run", kwargs={"team": team.slug, "run_id": clean.pk})).content.decode()
    assert "suspicious-rollouts" not in clean_html


def test_the_api_pages_is_team_scoped_and_refuses_a_bad_page(team, owner, owner_api, outsider_api, workshop):
    run = scanned_run(team, owner, workshop, "shotgun", seeds=(0, 1, 2))
    page = owner_api.get(f"/runs/{run.pk}/suspicious?offset=1&limit=1").json()
    assert page["count"] == 3 and [row["seed"] for row in page["suspicious"]] == [1]
    assert outsider_api.get(f"/runs/{run.pk}/suspicious").status_code == 404
    response = owner_api.get(f"/runs/{run.pk}/suspicious?limit=0")
    assert response.status_code == 400 and response.json()["field"] == "limit"
    # Scanning again replaces the scan: the same rows, not twice as many.
    run_scan(run_id=run.pk)
    assert SuspiciousRollout.objects.filter(run=run).count() == 3


@pytest.mark.integration
def test_a_worker_scans_the_run_when_it_ends(team, owner, owner_api, workshop, celery_worker):
    agent = scripted_agent(team, owner, AGENTS["shotgun"], name="shotgun")
    run = run_services.run_create(team=team, actor=owner, version=workshop, agent=agent, seeds=[0])
    assert owner_api.get(f"/runs/{run.pk}/suspicious").json()["scanned"] is False
    wait_for(lambda: TranscriptScan.objects.filter(run=run).exists(), 120, f"run {run.pk} to be scanned")
    assert checks(suspicious_of(owner_api, run)) == {0: ["shotgun"]}
