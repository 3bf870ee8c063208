"""Remote sessions through the API (Django's test client): start, step, close, idle reaping, scoping."""
import pytest

import time

from runs.models import LabelSource, Rollout, RolloutStatus, RunStatus
from tests.processes import episode_host, episode_host_prefix, own_episode_host, wait_for  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("episode_host")]


def start(api, version="inventory-tools@1", task_id="q1", seed=0):
    response = api.post("/sessions", {"version": version, "task_id": task_id, "seed": seed})
    assert response.status_code == 201, response.content
    return response.json()


def test_a_session_plays_an_episode_recorded_as_a_remote_rollout(owner_api, inventory):
    opened = start(owner_api)
    assert opened["observation"]["question"] == "How many blue widgets are in stock?"
    assert {t["name"] for t in opened["tools"]} == {"lookup_item", "list_items", "submit_answer"}
    rollout = Rollout.objects.select_related("run__agent").get(pk=opened["rollout_id"])
    assert rollout.status == RolloutStatus.RUNNING and rollout.run.agent.kind == "remote"

    sid = opened["session_id"]
    step = owner_api.post(f"/sessions/{sid}/step", {"action": {"tool": "lookup_item", "arguments": {"name": "blue widget"}}}).json()
    assert step["index"] == 0 and step["observation"]["last_tool_result"]["quantity"] == 42
    assert step["reward"] == 0.0 and step["terminated"] is False and step["truncated"] is False
    step = owner_api.post(f"/sessions/{sid}/step", {"action": {"tool": "submit_answer", "arguments": {"answer": "42"}}}).json()
    assert step["terminated"] is True and step["reward"] == 1.0
    again = owner_api.post(f"/sessions/{sid}/step", {"action": {"tool": "submit_answer", "arguments": {"answer": "1"}}})
    assert again.status_code == 409 and "episode is over" in again.json()["detail"]

    closed = owner_api.post(f"/sessions/{sid}/close").json()
    assert closed["status"] == "succeeded" and closed["verifier_reward"] == 1.0 and closed["step_count"] == 2
    assert closed["end_reason"] == "terminated"
    rollout.refresh_from_db()
    assert [s.index for s in rollout.steps.order_by("index")] == [0, 1]
    label = rollout.labels.get()
    assert label.source == LabelSource.VERIFIER and label.value == 1.0 and label.decision == "proposed"
    assert rollout.run.__class__.objects.get(pk=rollout.run_id).status == RunStatus.FINISHED
    assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 404
    assert owner_api.get(f"/rollouts/{rollout.pk}").json()["reproduction"]["session"] is True


def test_closing_early_verifies_what_was_done(owner_api, inventory):
    sid = start(owner_api)["session_id"]
    closed = owner_api.post(f"/sessions/{sid}/close").json()
    assert closed["status"] == "failed" and closed["verifier_reason"] == "no answer submitted"
    assert closed["end_reason"] == "closed"


def test_an_idle_session_is_closed_and_its_sandbox_ends(owner_api, inventory, own_episode_host):
    own_episode_host(SESSION_IDLE_TIMEOUT_S=0.4)
    opened = start(owner_api)
    sid = opened["session_id"]
    owner_api.post(f"/sessions/{sid}/step", {"action": {"tool": "list_items", "arguments": {"category": "tools"}}})
    rollout = wait_for(
        lambda: Rollout.objects.filter(pk=opened["rollout_id"]).exclude(status=RolloutStatus.RUNNING).first(), 10,
        "the idle session to be closed",
    )
    assert rollout.status == RolloutStatus.TIMED_OUT and rollout.end_reason == "idle_timeout"
    assert "idle" in rollout.error and rollout.step_count == 1
    assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 404


def test_paused_clients_steps_are_flushed_by_the_reaper(owner_api, inventory):
    opened = start(owner_api)
    sid = opened["session_id"]
    owner_api.post(f"/sessions/{sid}/step", {"action": {"tool": "list_items", "arguments": {"category": "tools"}}})
    deadline = time.monotonic() + 15  # the reaper's flush comes within a second; a loaded machine is slower
    while Rollout.objects.get(pk=opened["rollout_id"]).step_count != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Rollout.objects.get(pk=opened["rollout_id"]).step_count == 1
    owner_api.post(f"/sessions/{sid}/close")


def test_sessions_are_team_scoped(owner_api, outsider_api, inventory):
    sid = start(owner_api)["session_id"]
    assert outsider_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 404
    assert outsider_api.post(f"/sessions/{sid}/close").status_code == 404
    assert outsider_api.post("/sessions", {"version": "inventory-tools@1", "task_id": "q1"}).status_code == 404
    owner_api.post(f"/sessions/{sid}/close")


def test_a_viewer_cannot_start_a_session(viewer, team, inventory):
    from tests.conftest import api_for

    assert api_for(viewer, team).post("/sessions", {"version": "inventory-tools@1", "task_id": "q1"}).status_code == 403


def test_bad_input_is_a_4xx_naming_the_field(owner_api, inventory):
    response = owner_api.post("/sessions", {"version": "inventory-tools@1", "task_id": "nope"})
    assert response.status_code == 400 and response.json()["field"] == "task_id"
    response = owner_api.post("/sessions", {"version": "inventory-tools@1", "task_id": "q1", "seed": -1})
    assert response.status_code == 422 and response.json()["field"] == "seed"
    assert owner_api.post("/sessions", {"task_id": "q1"}).status_code == 422


def test_an_env_that_crashes_mid_session_ends_it_errored(owner_api, team, owner):
    from tests.runs.rollout_factories import package_version

    package_version(team, owner, "crashy", """
        class Env:
            def reset(self, task, seed):
                return 0
            def step(self, action):
                raise ValueError("boom")
    """)
    sid = start(owner_api, version="crashy@1", task_id="t1")["session_id"]
    response = owner_api.post(f"/sessions/{sid}/step", {"action": 1})
    assert response.status_code == 409 and "boom" in response.json()["detail"]
    rollout = Rollout.objects.get(run__environment_version__environment__slug="crashy")
    assert rollout.status == RolloutStatus.ERRORED and "boom" in rollout.error
    assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 404
