"""The `openai` agent end to end: the engine, the real httpx client, and a stand-in model on loopback."""
import json

import pytest

from runs import services
from runs.models import RolloutStatus
from tests.agents.conftest import SECRET, Scripted, reply, tool_call
from tests.runs.rollout_factories import play_run

pytestmark = pytest.mark.django_db(transaction=True)


def play(team, owner, version, agent, task_id="q1"):
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=[task_id], seeds=[0])
    (rollout,) = play_run(run)
    return rollout, list(rollout.steps.order_by("index"))


def test_model_answers_with_tool_calls_and_the_rollout_succeeds(team, owner, inventory, model_agent, model_server):
    model_server.add(
        reply(tool_call("lookup_item", {"name": "blue widget"}, "c1"), usage=(100, 20)),
        reply(tool_call("submit_answer", {"answer": "42"}, "c2"), usage=(150, 10)),
    )
    rollout, steps = play(team, owner, inventory, model_agent(temperature=0.3, max_tokens=77))

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.verifier_reward == 1.0
    assert [s.action for s in steps] == [
        {"tool": "lookup_item", "arguments": {"name": "blue widget"}},
        {"tool": "submit_answer", "arguments": {"answer": "42"}},
    ]
    record = steps[0].info["agent"]
    assert record["turn"] == 1 and record["attempts"] == 1 and record["latency_ms"] >= 0
    assert record["request"]["messages"] == 2 and record["request"]["bytes"] > 100
    assert record["reply"]["tool_calls"][0]["name"] == "lookup_item"
    assert record["usage"]["total_tokens"] == 120
    assert steps[1].info["agent"]["usage"]["total_tokens"] == 160

    first, second = (r["body"] for r in model_server.requests)
    assert model_server.requests[0]["path"] == "/v1/chat/completions"
    assert model_server.requests[0]["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert first["model"] == "stand-in" and first["temperature"] == 0.3 and first["max_tokens"] == 77
    assert {t["function"]["name"] for t in first["tools"]} == {"lookup_item", "list_items", "submit_answer"}
    assert "How many blue widgets" in json.dumps(first["messages"])
    assert '"answer"' not in first["messages"][0]["content"]  # the hidden task field never reaches the model
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "c1"
    assert json.loads(tool_message["content"])["last_tool_result"]["quantity"] == 42


def test_several_tool_calls_in_one_reply_become_consecutive_steps(team, owner, inventory, model_agent, model_server):
    model_server.add(
        reply(tool_call("list_items", {"category": "fasteners"}, "a"), tool_call("lookup_item", {"name": "hex bolt"}, "b")),
        reply(tool_call("submit_answer", {"answer": "350"}, "c")),
    )
    rollout, steps = play(team, owner, inventory, model_agent(), task_id="q1")
    assert len(steps) == 3 and len(model_server.requests) == 2
    assert steps[1].info["agent"] == {"turn": 1, "call": 1, "call_id": "b"}
    ids = [m.get("tool_call_id") for m in model_server.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert ids == ["a", "b"]


def test_malformed_tool_calls_are_recorded_steps_the_model_reads_next_turn(team, owner, inventory, model_agent, model_server):
    model_server.add(
        reply(tool_call("lookup_item", '{"name": "blue widget"', "bad-json")),
        reply(tool_call("teleport", {"to": "aisle A1"}, "unknown")),
        reply(tool_call("lookup_item", {"name": "blue widget"}, "ok1")),
        reply(tool_call("lookup_item", {"item": "blue widget"}, "bad-schema")),
        reply(tool_call("submit_answer", {"answer": "42"}, "ok2")),
    )
    rollout, steps = play(team, owner, inventory, model_agent())

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    errors = [s.info.get("agent_error") for s in steps]
    assert "not valid JSON" in errors[0]
    assert "unknown tool 'teleport'" in errors[1]
    assert errors[2] is None and steps[2].observation["last_tool_result"]["quantity"] == 42
    assert "arguments.name is required" in errors[3]
    assert errors[4] is None and steps[4].reward == 1.0
    # The env never saw a malformed call: the observation stays what it was.
    assert steps[0].observation["last_tool"] is None and steps[1].observation["last_tool"] is None
    fed_back = [r["body"]["messages"][-1] for r in model_server.requests[1:]]
    assert fed_back[0] == {"role": "tool", "tool_call_id": "bad-json", "content": json.dumps({"error": errors[0]})}
    assert "unknown tool" in fed_back[1]["content"]


def test_too_many_malformed_calls_in_a_row_end_the_rollout_errored_with_the_reason(team, owner, inventory, model_agent, model_server):
    model_server.add(*[reply(tool_call("teleport", {}, f"x{i}")) for i in range(5)])
    rollout, steps = play(team, owner, inventory, model_agent(max_errors=3))
    assert rollout.status == RolloutStatus.ERRORED
    assert "3 malformed actions in a row" in rollout.error and "teleport" in rollout.error
    assert len(steps) == 2 and len(model_server.requests) == 3


def test_429_and_5xx_are_retried_with_backoff(team, owner, inventory, model_agent, model_server):
    model_server.add(
        Scripted(status=429, headers={"Retry-After": "0.01"}),
        Scripted(status=502),
        reply(tool_call("submit_answer", {"answer": "42"}, "s")),
    )
    rollout, steps = play(team, owner, inventory, model_agent(max_retries=3))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    record = steps[0].info["agent"]
    assert record["attempts"] == 3 and record["retried"][0].startswith("HTTP 429") and record["retried"][1].startswith("HTTP 502")


def test_an_endpoint_that_keeps_failing_ends_the_rollout_errored_after_the_retries(team, owner, inventory, model_agent, model_server):
    model_server.add(*[Scripted(status=503) for _ in range(5)])
    rollout, steps = play(team, owner, inventory, model_agent(max_retries=2))
    assert rollout.status == RolloutStatus.ERRORED
    assert rollout.error.startswith("model endpoint failed 3 times; last: HTTP 503")
    assert steps == [] and len(model_server.requests) == 3


def test_a_slow_answer_times_out_and_is_retried(team, owner, inventory, model_agent, model_server):
    model_server.add(
        Scripted(reply(tool_call("submit_answer", {"answer": "1"}, "slow")), delay_s=1.0),
        reply(tool_call("submit_answer", {"answer": "42"}, "fast")),
    )
    rollout, steps = play(team, owner, inventory, model_agent(timeout_s=0.3))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert steps[0].info["agent"]["retried"] == ["no answer within timeout_s=0.3 s"]


def test_a_refused_request_ends_the_rollout_at_once(team, owner, inventory, model_agent, model_server):
    model_server.add(Scripted({"error": {"message": "invalid api key"}}, status=401))
    rollout, _ = play(team, owner, inventory, model_agent())
    assert rollout.status == RolloutStatus.ERRORED
    assert rollout.error == "model endpoint refused the request: HTTP 401: invalid api key"
    assert SECRET not in rollout.error


def test_the_turn_limit_ends_the_episode_and_the_verifier_judges_it(team, owner, inventory, model_agent, model_server):
    model_server.fallback = Scripted(reply(tool_call("list_items", {"category": "tools"}, "again")))
    rollout, steps = play(team, owner, inventory, model_agent(max_turns=3))
    assert rollout.status == RolloutStatus.FAILED and rollout.end_reason == "max_turns"
    assert len(steps) == 3 and rollout.verifier_reason == "no answer submitted"
