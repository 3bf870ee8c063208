"""Faults of browser environments: slow pages, runaway scripts, dialogs, popups, downloads, other
origins and a Chromium that dies. Each ends as a step error or an errored/timed-out rollout with a reason."""
import json
import textwrap

import pytest

from runs import services
from tests.browser_envs.conftest import browser_version
from tests.runs.rollout_factories import play_run, scripted_agent

pytestmark = [pytest.mark.browser, pytest.mark.django_db]

FAULT_ENV = textwrap.dedent(
    '''
    import os, signal, time

    from studio_sdk.browser import BrowserEnvironment, Request, respond

    PAGES = {
        "/": "<title>Home</title><h1>Home</h1><a href='/alert'>alert</a>",
        "/alert": "<title>Alert</title><script>alert('hello from the page')</script><p>after the alert</p>",
        "/popup": "<title>Popup</title><button onclick=\\"window.open('/')\\">open</button>",
        "/spin": "<title>Spin</title><script>while (true) {}</script>",
        "/external": "<title>External</title><img src='http://203.0.113.9/pixel.png'><a href='http://203.0.113.9/'>out</a>",
    }


    class Faults(BrowserEnvironment):
        navigation_timeout_ms = 1500
        action_timeout_ms = 1500

        def make_site(self, task, seed):
            def app(environ, start_response):
                path = Request(environ).path
                if path == "/slow":
                    time.sleep(30)  # a page that never finishes within the navigation timeout
                if path == "/download":
                    return respond(start_response, b"a,b\\n", content_type="text/csv",
                                   headers=[("Content-Disposition", "attachment; filename=data.csv")])
                return respond(start_response, PAGES.get(path, "<title>404</title>"))
            return app

        def step(self, action):
            if action == {"action": "crash"}:
                # Kill this sandbox's Chromium (same uid) the way an OOM killer would.
                for pid in os.listdir("/proc"):
                    try:
                        if pid.isdigit() and b"chromium" in open(f"/proc/{pid}/cmdline", "rb").read():
                            os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.5)
                action = {"action": "wait", "ms": 100}
            return super().step(action)

        def verify(self):
            return 1.0, "survived"
    '''
)

REPLAY_AGENT = """
actions = []

def reset(task, seed):
    global actions
    actions = list(task["actions"])

def act(observation, info):
    return actions.pop(0) if actions else {"action": "done", "answer": "ok"}
"""

TASKS = [
    {"id": "slow", "difficulty": 1, "actions": [{"action": "goto", "url": "/slow"}]},
    {"id": "dialog", "difficulty": 1, "actions": [{"action": "goto", "url": "/alert"}]},
    {"id": "popup", "difficulty": 1, "actions": [{"action": "goto", "url": "/popup"}, {"action": "click", "selector": "button"}]},
    {"id": "download", "difficulty": 1, "actions": [{"action": "goto", "url": "/download"}]},
    {"id": "external", "difficulty": 1, "actions": [{"action": "goto", "url": "/external"}, {"action": "goto", "url": "http://203.0.113.9/"}]},
    {"id": "spin", "difficulty": 1, "actions": [{"action": "goto", "url": "/spin"}]},
    {"id": "crash", "difficulty": 1, "actions": [{"action": "crash"}]},
]


@pytest.fixture
def fault_rollouts(team, owner):
    files = {
        "environment.toml": 'name = "faults"\nkind = "browser"\nentrypoint = "env:Faults"\nmax_steps = 5\n\n'
        "[limits]\nstep_timeout_s = 6\nepisode_timeout_s = 40\nmemory_mb = 1024\n",
        "env.py": FAULT_ENV,
        "tasks.jsonl": "".join(json.dumps(task) + "\n" for task in TASKS),
        "site/index.html": "<p>served by the WSGI app instead</p>",
    }
    version = browser_version(team, owner, "faults", files)
    agent = scripted_agent(team, owner, REPLAY_AGENT, name="replay")
    run = services.run_create(team=team, actor=owner, version=version, agent=agent,
                              task_ids=[task["id"] for task in TASKS], seeds=[0])
    return {rollout.task_id: rollout for rollout in play_run(run)}


def first_step(rollout, index=0):
    step = rollout.steps.filter(index=index).first()
    assert step is not None, f"{rollout.task_id}: no step {index}; rollout {rollout.status}: {rollout.error}"
    return step


def test_browser_faults_become_step_errors_or_ended_rollouts_with_reasons(fault_rollouts):
    r = fault_rollouts

    # A page that never finishes loading: the step's observation says so; the episode goes on.
    slow = first_step(r["slow"])
    assert "Timeout 1500ms exceeded" in slow.observation["error"]
    assert r["slow"].status == "succeeded"

    # A dialog is dismissed and recorded; the page behind it is readable.
    dialog = first_step(r["dialog"])
    assert dialog.info["dialogs"] == [{"type": "alert", "message": "hello from the page"}]
    assert "after the alert" in dialog.observation["text"]

    # A popup is closed and recorded.
    assert first_step(r["popup"], 1).info["popups"][0]["closed"] is True

    # A download is refused and recorded.
    download = first_step(r["download"])
    assert download.info["downloads"][0]["refused"] is True
    assert download.info["downloads"][0]["url"].endswith("/download")
    assert "Download" in download.observation["error"]

    # Requests to other origins are aborted and recorded; goto to another origin is refused.
    external = r["external"]
    assert "http://203.0.113.9/pixel.png" in first_step(external).info["blocked_urls"]
    refused = first_step(external, 1)
    assert "blocked" in refused.observation["error"]
    assert refused.info["blocked_urls"] == ["http://203.0.113.9/"]

    # An infinite script: the page never answers, the step runs past step_timeout_s.
    assert r["spin"].status == "timed_out"
    assert "did not answer within 6.0 s" in r["spin"].error

    # Chromium killed mid-episode: the rollout errors and says why.
    assert r["crash"].status == "errored"
    assert "BrowserCrashed" in r["crash"].error and "Chromium" in r["crash"].error
