"""The Python client against a real ASGI server: a Gymnasium-style loop, and batch evaluation of a
model agent through a Celery worker, with the API key never coming back out."""
import io
import json
import time

import pytest
from django.core.management import call_command

from runs.models import Rollout, RolloutStatus
from studio import services as studio_services
from studio_client import StudioClient, StudioEnv, StudioError
from tests.agents.conftest import SECRET, reply, tool_call
from tests.processes import asgi_server, celery_queue, celery_worker, episode_host, episode_host_prefix  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(episode_host, asgi_server, owner, team):  # noqa: F811 - the host first: the server reaches it
    _, raw = studio_services.token_create(team=team, actor=owner, name="loop")
    with StudioClient(asgi_server, raw) as studio:
        yield studio


@pytest.fixture
def queued_client(celery_queue, asgi_server, owner, team):  # noqa: F811 - celery_queue first: the server enqueues there
    """A client of an ASGI server that enqueues rollouts on this test's Celery queue."""
    _, raw = studio_services.token_create(team=team, actor=owner, name="batch")
    with StudioClient(asgi_server, raw) as studio:
        yield studio


def test_a_gymnasium_style_loop_drives_episodes_each_recorded_live(client, inventory):
    env = StudioEnv(client, "inventory-tools@1", task_ids=["q1", "q2"])
    observation, info = env.reset(seed=7, options={"task_id": "q1"})
    assert observation["question"].startswith("How many blue widgets") and len(info["tools"]) == 3
    first_rollout = info["rollout_id"]
    observation, reward, terminated, truncated, _ = env.step({"tool": "lookup_item", "arguments": {"name": "blue widget"}})
    assert observation["last_tool_result"]["quantity"] == 42 and (reward, terminated, truncated) == (0.0, False, False)
    # Live: the step is readable through the API while the episode is still open.
    deadline = time.monotonic() + 3
    while client.request("GET", f"/rollouts/{first_rollout}/steps")["count"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.request("GET", f"/rollouts/{first_rollout}")["status"] == "running"
    assert client.request("GET", f"/rollouts/{first_rollout}/steps")["count"] == 1
    *_, terminated, truncated, _ = env.step({"tool": "submit_answer", "arguments": {"answer": "42"}})
    assert terminated

    observation, info = env.reset(seed=9)  # closes the first episode; the seed picks the task (9 % 2 -> q2)
    assert observation["question"].startswith("In which aisle") and env.last_result["status"] == "succeeded"
    env.step({"tool": "submit_answer", "arguments": {"answer": "Z9"}})
    env.close()
    assert env.last_result["status"] == "failed"
    rollouts = Rollout.objects.filter(run__agent__kind="remote").order_by("id")
    assert [(r.task_id, r.seed, r.status) for r in rollouts] == [("q1", 7, "succeeded"), ("q2", 9, "failed")]


def test_a_session_object_and_errors(client, inventory):
    with client.session("inventory-tools@1", "q3", seed=1) as session:
        observation, info = session.reset()
        assert "fasteners" in observation["question"] and info["session_id"] == session.id
        session.step({"tool": "list_items", "arguments": {"category": "fasteners"}})
        observation, _ = session.reset()  # a fresh session for the same task
        assert observation["last_tool"] is None
    with pytest.raises(StudioError) as refused:
        client.session("inventory-tools@1", "nope")
    assert refused.value.status == 400 and refused.value.field == "task_id"
    assert Rollout.objects.filter(status=RolloutStatus.RUNNING).count() == 0


def test_batch_evaluation_of_a_model_agent_never_shows_its_key(queued_client, inventory, model_server, celery_worker, tmp_path):  # noqa: F811
    client = queued_client
    model_server.fallback = type(model_server.fallback)(reply(tool_call("submit_answer", {"answer": "42"}, "s"), usage=(100, 7)))
    agent = client.create_agent("gpt-stand-in", config={
        "base_url": model_server.base_url, "model": "stand-in", "price_prompt_per_mtok": 1.0, "price_completion_per_mtok": 2.0,
    }, api_key=SECRET)
    assert agent["kind"] == "openai" and agent["api_key_set"] is True and SECRET not in json.dumps(agent)

    run = client.run_batch("inventory-tools@1", agent["id"], seeds="0", poll_s=0.2, timeout_s=60)
    summary = run["summary"]
    assert summary["counts"]["succeeded"] == 1 and summary["counts"]["failed"] == 4
    assert summary["success_rate"] == 0.2 and set(summary["by_difficulty"]) == {"1", "2", "3"}
    assert run["usage"] == {"prompt_tokens": 500, "completion_tokens": 35, "total_tokens": 535, "model_calls": 5,
                            "cost": 0.00057}
    assert {r["headers"].get("Authorization") for r in model_server.requests} == {f"Bearer {SECRET}"}

    seen = [client.request("GET", "/agents"), client.request("GET", f"/agents/{agent['id']}"), run]
    for rollout in client.request("GET", f"/runs/{run['id']}/rollouts"):
        seen.append(client.request("GET", f"/rollouts/{rollout['id']}"))
        seen.append(client.request("GET", f"/rollouts/{rollout['id']}/steps"))
    exported = io.StringIO()
    call_command("export_trajectories", "--run", str(run["id"]), stdout=exported)
    assert exported.getvalue().count("\n") == 5
    assert SECRET not in json.dumps(seen) + exported.getvalue()
    assert SECRET not in (tmp_path / "worker.log").read_text()
    assert SECRET not in client.request("GET", "/openapi.json").__repr__()
