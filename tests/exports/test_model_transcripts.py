"""A model agent's rollout exports as the transcript the model saw; a text reply ends the episode."""
import json

import pytest

from environments.demo import DEMO_DIR, read_folder
from environments.package import validate_package
from runs import services
from runs.models import RolloutStatus
from runs.review.export import export_lines
from runs.review.export_chat import chat_message
from tests.agents.conftest import reply, tool_call
from tests.conftest import api_for
from tests.runs.rollout_factories import play_run

pytestmark = pytest.mark.django_db(transaction=True)


def play(team, owner, version, agent, task_id="q1"):
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=[task_id], seeds=[0])
    (rollout,) = play_run(run)
    return rollout


def chat_of(rollout, **kw):
    (line,) = export_lines(rollout.run.rollouts.all(), decision="all", fmt="chat", **kw)
    return json.loads(line)


def test_the_chat_export_is_exactly_what_the_model_was_sent(team, owner, inventory, model_agent, model_server):
    model_server.add(
        reply(tool_call("list_items", {"category": "widgets"}, "a"), tool_call("lookup_item", {"name": "blue widget"}, "b"),
              content="Let me look both up."),
        reply(tool_call("lookup_item", {"item": "blue widget"}, "bad")),
        reply(tool_call("submit_answer", {"answer": "42"}, "c"), content="It is 42."),
    )
    rollout = play(team, owner, inventory, model_agent(system_prompt="Answer warehouse questions. Task: {task}"))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error

    line = chat_of(rollout)
    messages = line["messages"]
    last_request = model_server.requests[-1]["body"]
    sent = [chat_message(m, "object") for m in last_request["messages"]]
    # Every message of the last request, in order, is the export's beginning (system prompt included) ...
    assert messages[: len(sent)] == sent
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Answer warehouse questions.")
    # ... then the final reply as the model wrote it and the result of its call.
    assert messages[len(sent)]["content"] == "It is 42."
    assert messages[len(sent)]["tool_calls"][0]["function"] == {"name": "submit_answer", "arguments": {"answer": "42"}}
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == "c"
    assert json.loads(messages[-1]["content"])["last_tool_result"] == {"submitted": "42"}

    # Parallel calls stay one assistant message with its text; the malformed call is answered by its error.
    grouped = [m for m in messages if m["role"] == "assistant" and m["tool_calls"] and len(m["tool_calls"]) == 2]
    assert len(grouped) == 1 and grouped[0]["content"] == "Let me look both up."
    error = next(m for m in messages if m["role"] == "tool" and m["tool_call_id"] == "bad")
    assert "arguments.name is required" in json.loads(error["content"])["error"]
    assert line["metadata"]["error_steps"] == [2] and line["metadata"]["transcript"] == "recorded"
    # The tools are those the environment reported (env.py's class), as offered to the model.
    assert [t["function"]["name"] for t in line["tools"]] == [t["function"]["name"] for t in model_server.requests[0]["body"]["tools"]]
    assert {t["function"]["name"] for t in line["tools"]} == {"lookup_item", "list_items", "submit_answer"}
    assert all(set(m) == {"role", "content", "tool_calls", "tool_call_id"} for m in messages)


def test_arguments_can_be_exported_as_the_json_text_the_model_wrote(team, owner, inventory, model_agent, model_server):
    model_server.add(reply(tool_call("submit_answer", '{"answer":  "42"}', "c")))
    rollout = play(team, owner, inventory, model_agent())
    (call,) = chat_of(rollout, arguments="string")["messages"][2]["tool_calls"]
    assert call["function"]["arguments"] == '{"answer":  "42"}'
    (call,) = chat_of(rollout)["messages"][2]["tool_calls"]
    assert call["function"]["arguments"] == {"answer": "42"}


def test_a_text_reply_ends_the_episode_and_the_verifier_judges_it(team, owner, inventory, model_agent, model_server):
    model_server.add(reply(tool_call("lookup_item", {"name": "blue widget"}, "a")), reply(content="There are 42."))
    rollout = play(team, owner, inventory, model_agent())

    assert rollout.status == RolloutStatus.FAILED and rollout.end_reason == "answered", rollout.error
    assert rollout.verifier_reason == "no answer submitted" and rollout.step_count == 1
    assert len(model_server.requests) == 2  # no "malformed" turns asked for a tool call
    messages = chat_of(rollout)["messages"]
    assert messages[-1] == {"role": "assistant", "content": "There are 42.", "tool_calls": None, "tool_call_id": None}
    assert messages[-2]["role"] == "tool" and messages[-2]["tool_call_id"] == "a"


def test_a_declared_text_answer_becomes_the_final_tool_call(team, owner, inventory_text_answer, model_agent, model_server):
    model_server.add(reply(content="42"))
    rollout = play(team, owner, inventory_text_answer, model_agent())

    assert rollout.status == RolloutStatus.SUCCEEDED and rollout.verifier_reward == 1.0, rollout.error
    (step,) = rollout.steps.all()
    assert step.action == {"tool": "submit_answer", "arguments": {"answer": "42"}}
    assert step.info["agent"]["text_answer"] is True
    messages = chat_of(rollout)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[-1]["content"] == "42" and messages[-1]["tool_calls"] is None


def test_a_malformed_text_answer_declaration_is_refused_with_its_line():
    files = read_folder(DEMO_DIR / "inventory_tools")
    files["environment.toml"] = 'text_answer = "submit answer!"\n' + files["environment.toml"]
    (problem,) = validate_package(files)
    assert (problem.file, problem.line) == ("environment.toml", 1) and "text_answer" in problem.reason


def test_runs_accept_an_agent_by_name(team, owner, inventory, model_agent):
    model_agent(name="gpt-standin")
    api = api_for(owner, team)
    made = api.post("/runs", {"version": inventory.label, "agent": "gpt-standin", "task_ids": ["q1"], "seeds": "0"})
    assert made.status_code == 201, made.content
    assert made.json()["agent"] == "gpt-standin"
    missing = api.post("/runs", {"version": inventory.label, "agent": "nobody", "task_ids": ["q1"], "seeds": "0"})
    assert missing.status_code == 400 and missing.json()["field"] == "agent"
    assert "agent's name" in missing.json()["detail"]
