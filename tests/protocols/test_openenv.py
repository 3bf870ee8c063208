"""OpenEnv's own client (openenv-core, unchanged) against a running studio: every episode it drives
is a recorded rollout, and bad input gets OpenEnv's error shapes."""
import asyncio
import json

import httpx
import pytest
from openenv.core import GenericEnvClient
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from runs.models import Rollout, RolloutStatus, Step
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def lookup(name):
    return {"type": "call_tool", "tool_name": "lookup_item", "arguments": {"name": name}}


def submit(answer):
    return {"type": "call_tool", "tool_name": "submit_answer", "arguments": {"answer": answer}}


def studio_action(call):
    return {"tool": call["tool_name"], "arguments": call["arguments"]}


def test_openenv_client_drives_recorded_episodes_through_the_base_url_with_its_key(openenv_of, inventory, owner):
    urls = openenv_of(inventory, owner)
    assert "/openenv/alpha/inventory-tools@1/k/oek" in urls["base_url"]
    assert openenv_of(inventory, owner)["base_url"] == urls["base_url"]  # the same URL every call

    with GenericEnvClient(base_url=urls["base_url"]).sync() as env:
        result = env.reset(task_id="q1", seed=7)
        assert result.done is False and result.reward == 0.0
        assert result.observation["question"].startswith("How many blue widgets")
        first = result.observation["metadata"]["rollout_id"]
        result = env.step(lookup("blue widget"))  # MCP's call_tool action: a CallToolObservation back
        assert result.observation["tool_name"] == "lookup_item" and result.observation["error"] is None
        assert result.observation["result"]["data"]["last_tool_result"]["quantity"] == 42
        assert (result.reward, result.done) == (0.0, False)
        state = env.state()
        facts = state["metadata"]
        assert state["step_count"] == 1 and facts["rollout_id"] == first and (facts["task_id"], facts["seed"]) == ("q1", 7)
        # The studio's own form of a tool call ({"action": {"tool", "arguments"}}) is still understood.
        result = env.step({"action": studio_action(submit("42"))})
        assert (result.reward, result.done, result.observation["metadata"]["terminated"]) == (1.0, True, True)
        # A second reset closes (verifies) the first episode and opens the next, chosen by the seed.
        result = env.reset(seed=1)
        second = result.observation["metadata"]["rollout_id"]
    first_rollout, second_rollout = Rollout.objects.get(pk=first), Rollout.objects.get(pk=second)
    assert (first_rollout.status, first_rollout.verifier_reward, first_rollout.step_count) == (RolloutStatus.SUCCEEDED, 1.0, 2)
    assert first_rollout.run.agent.name == "openenv" and first_rollout.run.agent.kind == "remote"
    assert [s.action for s in Step.objects.filter(rollout=first_rollout).order_by("index")] == [
        studio_action(lookup("blue widget")), studio_action(submit("42"))]
    # The client's disconnect (its close message) ends the second episode too, verified.
    assert second_rollout.task_id == inventory.tasks[1 % len(inventory.tasks)]["id"]
    wait_for(lambda: Rollout.objects.get(pk=second).status == RolloutStatus.FAILED, 10, "the second episode to be closed")
    assert Rollout.objects.get(pk=second).verifier_reason == "no answer submitted"
    # Both episodes, through one key and version, are one session run, finished once the last one ended.
    run = Rollout.objects.get(pk=second).run
    assert run.pk == first_rollout.run_id and run.purpose == "session" and run.session_key.startswith("openenv-key:")
    run = wait_for(lambda: type(run).objects.filter(pk=run.pk, status="finished", finished_at__isnull=False).first(), 10,
                   "the session run to finish with its last episode")
    assert run.rollouts.count() == 2


def test_same_seed_same_task_and_bearer_token_works_too(studio, token_of, inventory, owner):
    headers = {"Authorization": f"Bearer {token_of(owner)}"}

    async def episode(seed):
        async with connect(f"{studio.replace('http', 'ws')}/openenv/alpha/inventory-tools@1/ws", additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
            reply = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "state"}))
            state = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "close"}))
            return reply, state

    (a, state_a), (b, _) = asyncio.run(episode(5)), asyncio.run(episode(5))
    def fields(reply):
        return {key: value for key, value in reply["data"]["observation"].items() if key != "metadata"}

    assert a["type"] == "observation" and fields(a) == fields(b) and "question" in fields(a)
    assert state_a["type"] == "state" and state_a["data"]["metadata"]["seed"] == 5 and state_a["data"]["step_count"] == 0
    wait_for(lambda: not Rollout.objects.filter(status=RolloutStatus.RUNNING).exists(), 10, "both episodes to be closed")


def test_http_schema_metadata_health_and_a_stateful_http_episode(openenv_of, inventory, owner):
    base = openenv_of(inventory, owner)["base_url"]
    assert httpx.get(f"{base}/health").json() == {"status": "healthy"}
    metadata = httpx.get(f"{base}/metadata").json()
    assert metadata["name"] == "inventory_tools" and metadata["version"] == "1"
    reset = httpx.post(f"{base}/reset", json={"seed": 3, "task_id": "q1"}).json()
    assert set(reset) == {"observation", "reward", "done"} and reset["done"] is False
    episode_id = reset["observation"]["metadata"]["episode_id"]
    schema = httpx.get(f"{base}/schema").json()
    assert set(schema) == {"action", "observation", "state"}
    assert set(schema["action"]["properties"]["tool_name"]["enum"]) == {"lookup_item", "list_items", "submit_answer"}
    step = httpx.post(f"{base}/step", json={"action": lookup("red gadget"), "episode_id": episode_id})
    assert step.status_code == 200 and step.json()["observation"]["result"]["data"]["last_tool_result"]["aisle"] == "B3"
    state = httpx.get(f"{base}/state", params={"episode_id": episode_id}).json()
    assert state["step_count"] == 1 and state["episode_id"] == episode_id
    done = httpx.post(f"{base}/step", json={"action": submit("nope"), "episode_id": episode_id}).json()
    assert done["done"] is True and done["reward"] == 0.0
    rollout = Rollout.objects.get(pk=reset["observation"]["metadata"]["rollout_id"])
    assert rollout.status == RolloutStatus.FAILED and rollout.step_count == 2  # the end verified it: no close needed
    after = httpx.post(f"{base}/step", json={"action": lookup("red gadget"), "episode_id": episode_id})
    assert after.status_code == 404 and "No open episode" in after.json()["detail"]
