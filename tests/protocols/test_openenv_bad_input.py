"""Bad input over OpenEnv's protocol: each a clear error in OpenEnv's own shape, nothing half-written."""
import asyncio
import json

import httpx
import pytest
from openenv.core import GenericEnvClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from runs.models import Rollout, RolloutStatus
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/ws"


def exchange(url: str, *messages, headers=None) -> list[dict]:
    """Send each message (a dict, or raw text) and collect one reply per message."""

    async def run():
        replies = []
        async with connect(url, additional_headers=headers or {}) as ws:
            for message in messages:
                await ws.send(message if isinstance(message, str) else json.dumps(message))
                replies.append(json.loads(await ws.recv()))
        return replies

    return asyncio.run(run())


def test_malformed_messages_get_openenv_error_codes_and_the_session_goes_on(openenv_of, inventory, owner):
    url = ws_url(openenv_of(inventory, owner)["base_url"])
    replies = exchange(
        url,
        "{not json",
        {"type": "dance"},
        ["a", "list"],
        {"type": "step", "data": {"type": "call_tool", "tool_name": "list_items", "arguments": {"category": "tools"}}},  # before reset
        {"type": "reset", "data": {"seed": 1, "task": "q1"}},  # a misspelt parameter
        {"type": "reset", "data": {"task_id": "nope"}},
        {"type": "reset", "data": {"seed": -3}},
        {"type": "step"},  # no data
        {"type": "state", "extra": 1},
        {"type": "reset", "data": {"task_id": "q2", "seed": 0}},  # still serving after all that
    )
    codes = [reply["data"].get("code") if reply["type"] == "error" else reply["type"] for reply in replies]
    assert codes == ["INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR", "VALIDATION_ERROR",
                     "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR", "observation"]
    assert "Unknown message type: dance" in replies[1]["data"]["message"]
    assert "send `reset` first" in replies[3]["data"]["message"]
    assert replies[4]["data"]["errors"][0]["loc"] == ["data", "task"]
    assert "'nope' is not in inventory-tools@1" in replies[5]["data"]["errors"][0]["msg"]
    assert replies[7]["data"]["errors"][0]["loc"] == ["data"] and replies[7]["data"]["errors"][0]["type"] == "missing"
    # Only the last reset opened an episode; the refused ones wrote nothing.
    assert Rollout.objects.count() == 1
    # Leaving closed it (its last write done before the test's tables are emptied).
    rollout_id = Rollout.objects.get().pk
    wait_for(lambda: Rollout.objects.get(pk=rollout_id).status != RolloutStatus.RUNNING, 10, "the episode to close")


def test_an_action_failing_the_schema_is_refused_and_not_recorded(openenv_of, inventory, owner):
    base = openenv_of(inventory, owner)["base_url"]
    with GenericEnvClient(base_url=base).sync() as env:
        rollout_id = env.reset(task_id="q1", seed=0).observation["metadata"]["rollout_id"]
        # As MCPEnvironment answers: an unknown tool or bad arguments are the call's error, not a step.
        unknown = env.step({"type": "call_tool", "tool_name": "fly_away", "arguments": {}}).observation
        assert unknown["error"]["error_type"] == "tool_not_found" and unknown["result"] is None
        bad = env.step({"type": "call_tool", "tool_name": "lookup_item", "arguments": {"nom": "x"}}).observation
        assert bad["error"]["error_type"] == "invalid_args" and "name: Field required" in bad["error"]["message"]
        with pytest.raises(RuntimeError, match=r"Invalid message \(code: VALIDATION_ERROR\)"):
            env.step({"tool": "lookup_item", "arguments": {"name": "x"}})  # neither call_tool nor list_tools
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"type": "call_tool", "tool_name": 5})
        assert env.state()["step_count"] == 0
        result = env.step({"type": "call_tool", "tool_name": "lookup_item", "arguments": {"name": "hex bolt"}})
        assert result.observation["result"]["data"]["last_tool_result"]["quantity"] == 350
    wait_for(lambda: Rollout.objects.get(pk=rollout_id).status != RolloutStatus.RUNNING, 10, "the episode to close")
    assert Rollout.objects.get(pk=rollout_id).step_count == 1
    # Over HTTP the same refusal is FastAPI's 422 shape, naming the field.
    episode_id = httpx.post(f"{base}/reset", json={"task_id": "q1"}).json()["observation"]["metadata"]["episode_id"]
    refused = httpx.post(f"{base}/step", json={"action": {"type": "call_tool", "arguments": {}}, "episode_id": episode_id})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["tool_name"]  # the action's own, as openenv-core
    missing = httpx.post(f"{base}/step", json={"action": {"type": "call_tool", "tool_name": "list_items", "arguments": {"category": "tools"}}})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "episode_id"]
    assert httpx.post(f"{base}/close", json={"episode_id": episode_id}).json()["closed"] is True


def test_a_step_after_close_is_an_error_not_a_new_episode(openenv_of, inventory, owner):
    base = openenv_of(inventory, owner)["base_url"]
    client = GenericEnvClient(base_url=base).sync()
    client.connect()
    client.reset(task_id="q1", seed=0)
    client.close()  # sends `close`: the server ends the episode and the connection
    with pytest.raises(RuntimeError, match=r"No episode is open.*EXECUTION_ERROR"):
        client.step({"type": "call_tool", "tool_name": "list_items", "arguments": {"category": "tools"}})  # reconnects: no episode
    client.close()
    wait_for(lambda: not Rollout.objects.filter(status=RolloutStatus.RUNNING).exists(), 10, "the episode to close")
    assert Rollout.objects.count() == 1


def test_credentials_another_team_revoked_keys_and_unknown_paths(studio, openenv_of, token_of, inventory, owner, outsider, other_team):
    urls = openenv_of(inventory, owner)
    outsider_token = token_of(outsider, for_team=other_team)
    # Another team's token, on HTTP and on the websocket (told in OpenEnv's shape, then closed 4403).
    plain = urls["base_url_without_key"]
    response = httpx.get(f"{plain}/schema", headers={"Authorization": f"Bearer {outsider_token}"})
    assert response.status_code == 403 and "another team" in response.json()["detail"]
    assert httpx.get(f"{plain}/schema").status_code == 401

    async def refused_ws(url, headers=None):
        async with connect(url, additional_headers=headers or {}) as ws:
            reply = json.loads(await ws.recv())
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return reply, ws.close_code

    reply, code = asyncio.run(refused_ws(f"{ws_url(plain)}", {"Authorization": f"Bearer {outsider_token}"}))
    assert (reply["type"], reply["data"]["code"], code) == ("error", "SESSION_ERROR", 4403)
    # A key only opens its own version: the same key under another path is refused.
    key_path = urls["base_url"].split("/k/")[1]
    wrong = httpx.get(f"{studio}/openenv/alpha/frozen-lake@1/k/{key_path}/schema")
    assert wrong.status_code == 403 and "inventory-tools@1" in wrong.json()["detail"]
    # Revoked: the old URL stops working, a new one is issued.
    revoked = httpx.post(f"{studio}/api/v1/environments/inventory-tools/versions/1/openenv/revoke",
                         headers={"Authorization": f"Bearer {token_of(owner)}"}).json()
    assert revoked["base_url"] != urls["base_url"]
    wait_for(lambda: httpx.get(f"{urls['base_url']}/schema").status_code == 401, 10, "the revoked key to stop working")
    assert httpx.get(f"{revoked['base_url']}/schema").status_code == 200
    # Unknown paths: 404, never a 500, over HTTP and websocket alike.
    assert httpx.get(f"{revoked['base_url']}/nope").status_code == 404
    assert httpx.get(f"{studio}/openenv/not-a-version").status_code == 404
    for path in ("/openenv/alpha/inventory-tools@1/nope", "/openenv/garbage", "/openenv/alpha/inventory-tools@1/k/x/ws/more"):
        with pytest.raises(InvalidStatus) as rejected:
            asyncio.run(refused_ws(f"{studio.replace('http://', 'ws://')}{path}"))
        assert rejected.value.response.status_code == 404
    assert Rollout.objects.count() == 0
