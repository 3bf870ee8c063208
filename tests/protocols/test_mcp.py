"""A tool-use environment's tools over MCP, with the real `mcp` client package: each MCP session
is a studio episode, recorded and verified like any other."""
import asyncio
import json

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from runs.models import Rollout, RolloutStatus, Step
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def with_session(url, work):
    async def run():
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                initialized = await session.initialize()
                return await work(session, initialized)

    return asyncio.run(run())


def test_mcp_client_lists_and_calls_tools_and_each_session_is_a_recorded_episode(openenv_of, inventory, owner):
    url = openenv_of(inventory, owner)["mcp_url"] + "?task_id=q1&seed=4"

    async def work(session, initialized):
        listed = await session.list_tools()
        looked = await session.call_tool("lookup_item", {"name": "blue widget"})
        wrong = await session.call_tool("lookup_item", {"name": "purple unicorn"})
        submitted = await session.call_tool("submit_answer", {"answer": "42"})
        return initialized, listed, looked, wrong, submitted

    initialized, listed, looked, wrong, submitted = with_session(url, work)
    start = json.loads(initialized.instructions)
    assert start["observation"]["question"].startswith("How many blue widgets") and (start["task_id"], start["seed"]) == ("q1", 4)
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"lookup_item", "list_items", "submit_answer"}
    assert tools["lookup_item"].input_schema["required"] == ["name"]
    assert looked.is_error is False and looked.structured_content["observation"]["last_tool_result"]["quantity"] == 42
    assert json.loads(looked.content[0].text)["last_tool_result"]["aisle"] == "A1"
    assert wrong.is_error is True  # the environment's own refusal, recorded as a step
    assert submitted.structured_content["reward"] == 1.0 and submitted.structured_content["terminated"] is True
    rollout = Rollout.objects.get(pk=start["rollout_id"])
    assert (rollout.status, rollout.verifier_reward, rollout.step_count) == (RolloutStatus.SUCCEEDED, 1.0, 3)
    assert rollout.run.agent.name == "mcp"
    assert Step.objects.filter(rollout=rollout).order_by("index").first().action == {
        "tool": "lookup_item", "arguments": {"name": "blue widget"}}


def test_mcp_bad_calls_are_json_rpc_errors_and_leaving_closes_the_episode(openenv_of, inventory, owner, frozen_lake):
    url = openenv_of(inventory, owner)["mcp_url"]

    async def work(session, initialized):
        errors = []
        for name, arguments in (("fly", {}), ("lookup_item", {"nom": "x"})):
            try:
                await session.call_tool(name, arguments)
            except Exception as exc:  # noqa: BLE001 - the client raises its McpError
                errors.append(str(exc))
        return json.loads(initialized.instructions)["rollout_id"], errors

    rollout_id, errors = with_session(url, work)
    assert "Unknown tool: 'fly'" in errors[0] and "Invalid arguments for lookup_item" in errors[1] and "name: Field required" in errors[1]
    # Leaving the client (DELETE) verified and ended the episode; the refused calls wrote no step.
    wait_for(lambda: Rollout.objects.get(pk=rollout_id).status != RolloutStatus.RUNNING, 10, "the MCP episode to close")
    assert Rollout.objects.get(pk=rollout_id).step_count == 0
    # No MCP session: openenv-core's JSON-RPC (runs/protocols/jsonrpc.py) lists the tools; no credential,
    # an environment without tools: clear refusals.
    plain = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"accept": "application/json, text/event-stream"})
    assert plain.status_code == 200 and {tool["name"] for tool in plain.json()["result"]["tools"]} >= {"lookup_item"}
    keyless = url.split("/k/")[0] + "/mcp"
    assert httpx.post(keyless, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 401
    lake = openenv_of(frozen_lake, owner)["mcp_url"]
    refused = httpx.post(lake, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}})
    assert refused.status_code == 400 and "has no tools" in refused.json()["error"]["message"]


def test_an_mcp_url_with_a_curriculum_gets_the_samplers_task_for_its_agent(openenv_of, inventory, owner, team):
    """`?curriculum=learnable&agent=NAME` on the MCP URL: each session's task is the sampler's pick from that
    agent's statistics (q3 is the one still learnable), recorded as that agent's; a bad strategy is refused."""
    from runs.curriculum.models import TaskStat

    for task_id, successes in (("q1", 40), ("q2", 40), ("q3", 20), ("q4", 0), ("q5", 0)):
        TaskStat.objects.create(team=team, environment_version=inventory, task_id=task_id, agent_name="tool-user",
                                rollouts=40, successes=successes, steps_sum=40)
    base = openenv_of(inventory, owner)["mcp_url"]

    async def work(session, initialized):
        return json.loads(initialized.instructions)

    started = [with_session(f"{base}?curriculum=learnable&agent=tool-user&seed={seed}", work) for seed in range(4)]
    assert [start["task_id"] for start in started].count("q3") >= 3, started
    assert {Rollout.objects.get(pk=start["rollout_id"]).run.agent.name for start in started} == {"tool-user"}
    named = with_session(f"{base}?curriculum=learnable&agent=tool-user&task_id=q1", work)
    assert named["task_id"] == "q1"  # a named task keeps it
    refused = httpx.post(f"{base}?curriculum=greedy", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert refused.status_code == 400 and "curriculum must be one of" in refused.json()["error"]["message"]
