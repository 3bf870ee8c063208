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


def play_fault(team, owner, task_id):
    """The rollout of one fault task (each in its own test, so xdist runs them side by side)."""
    files = {
        "environment.toml": 'name = "faults"\nkind = "browser"\nentrypoint = "env:Faults"\nmax_steps = 5\n\n'
        "[limits]\nstep_timeout_s = 6\nepisode_timeout_s = 40\nmemory_mb = 1024\n",
        "env.py": FAULT_ENV,
        "tasks.jsonl": "".join(json.dumps(task) + "\n" for task in TASKS),
        "site/index.html": "<p>served by the WSGI app instead</p>",
    }
    version = browser_version(team, owner, "faults", files)
    agent = scripted_agent(team, owner, REPLAY_AGENT, name="replay")
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=[task_id], seeds=[0])
    [rollout] = play_run(run)
    return rollout


def first_step(rollout, index=0):
    step = rollout.steps.filter(index=index).first()
    assert step is not None, f"{rollout.task_id}: no step {index}; rollout {rollout.status}: {rollout.error}"
    return step


def test_a_page_that_never_loads_is_a_step_error_and_the_episode_goes_on(team, owner):
    slow = play_fault(team, owner, "slow")
    assert "Timeout 1500ms exceeded" in first_step(slow).observation["error"]
    assert slow.status == "succeeded"


def test_a_dialog_is_dismissed_and_recorded_and_the_page_behind_it_is_readable(team, owner):
    dialog = first_step(play_fault(team, owner, "dialog"))
    assert dialog.info["dialogs"] == [{"type": "alert", "message": "hello from the page"}]
    assert "after the alert" in dialog.observation["text"]


def test_a_popup_is_closed_and_recorded(team, owner):
    assert first_step(play_fault(team, owner, "popup"), 1).info["popups"][0]["closed"] is True


def test_a_download_is_refused_and_recorded(team, owner):
    download = first_step(play_fault(team, owner, "download"))
    assert download.info["downloads"][0]["refused"] is True
    assert download.info["downloads"][0]["url"].endswith("/download")
    assert "Download" in download.observation["error"]


def test_requests_to_other_origins_are_aborted_and_a_goto_there_is_refused(team, owner):
    external = play_fault(team, owner, "external")
    assert "http://203.0.113.9/pixel.png" in first_step(external).info["blocked_urls"]
    refused = first_step(external, 1)
    assert "blocked" in refused.observation["error"]
    assert refused.info["blocked_urls"] == ["http://203.0.113.9/"]


def test_an_infinite_script_times_the_rollout_out_past_step_timeout(team, owner):
    spin = play_fault(team, owner, "spin")
    assert spin.status == "timed_out"
    assert "did not answer within 6.0 s" in spin.error


def test_chromium_killed_mid_episode_errors_the_rollout_and_says_why(team, owner):
    crash = play_fault(team, owner, "crash")
    assert crash.status == "errored"
    assert "BrowserCrashed" in crash.error and "Chromium" in crash.error
