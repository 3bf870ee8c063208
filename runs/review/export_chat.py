"""The chat export of one rollout: the transcript a model agent saw, in OpenAI's chat form.

A model agent's rollout carries its own record (runs/openai_agent.py): each exchange's step holds
the messages that request added and the assistant message as received, so the transcript is those
records in order plus the results of the last turn's calls (no later request carried them), built by
the agent's own message functions. Rollouts of other agents get a transcript rebuilt from their
steps. Every row has the same keys and types, whatever the rollout: `messages` (each message with
role, content, tool_calls, tool_call_id), `tools` (OpenAI function form), `reward`, `metadata`.
"""
import json

from studio_client.tools import function_tools

from ..openai_agent import step_error_message, tool_result_message

ARGUMENT_MODES = ("object", "string")
# Arguments that are not a JSON object (a malformed call) keep their text under this key in object mode.
RAW_ARGUMENTS_KEY = "__raw_arguments__"


def arguments_as(raw, mode: str):
    """Tool-call arguments as an object (mode "object") or as JSON text (mode "string"), never both:
    text the model wrote is kept as written in string mode and parsed once in object mode."""
    if mode == "string":
        return raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {}, ensure_ascii=False)
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {RAW_ARGUMENTS_KEY: raw}
        return parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS_KEY: raw}
    return {RAW_ARGUMENTS_KEY: json.dumps(raw, ensure_ascii=False)}


def chat_message(message: dict, mode: str) -> dict:
    """One message with the four keys every exported message has."""
    calls = message.get("tool_calls") or None
    if calls:
        calls = [
            {
                "id": str(call.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str((call.get("function") or {}).get("name") or ""),
                    "arguments": arguments_as((call.get("function") or {}).get("arguments"), mode),
                },
            }
            for call in calls if isinstance(call, dict)
        ]
    content = message.get("content")
    if content is None and calls:
        # A call with no text has content "" (never null): TRL's trainers drop a dataset's None values
        # (remove_none_values), and templates that concatenate content (deepseek) need it there.
        content = ""
    return {
        "role": str(message.get("role") or ""),
        "content": content if isinstance(content, str) or content is None else json.dumps(content, ensure_ascii=False),
        "tool_calls": calls or None,
        "tool_call_id": message.get("tool_call_id"),
    }


def _agent_record(info) -> dict:
    record = info.get("agent") if isinstance(info, dict) else None
    return record if isinstance(record, dict) else {}


def recorded_transcript(steps, last_turn: dict | None) -> tuple[list[dict], list] | None:
    """(messages, tools) from a model agent's records, or None when the rollout has none.
    `steps`: (index, action, observation, info) in order; `last_turn`: the record of a final turn that
    took no step (the model's answer in text, kept in the rollout's reproduction)."""
    messages: list[dict] = []
    tools = None
    pending = []  # the steps of the latest recorded exchange: their results are sent with the next request
    for step in steps:
        record = _agent_record(step[3])
        if "messages" in record and "assistant" in record:
            messages.extend(record["messages"])
            messages.append(record["assistant"])
            if tools is None and "tools" in record:
                tools = record["tools"]
            pending = []
        pending.append(step)
    if last_turn and "messages" in last_turn:
        messages.extend(last_turn["messages"])
        messages.append(last_turn["assistant"])
        if tools is None:
            tools = last_turn.get("tools")
        return messages, tools or []
    if not messages:
        return None
    for _, _, observation, info in pending:
        record = _agent_record(info)
        error = info.get("agent_error") if isinstance(info, dict) else None
        call_id = record.get("call_id")
        if error:
            messages.append(step_error_message(call_id, error))
        elif record.get("text_answer"):
            continue  # the model's answer itself: it read nothing after it
        elif call_id:
            messages.append(tool_result_message(call_id, observation))
        else:
            messages.append({"role": "user", "content": tool_result_message("", observation)["content"]})
    return messages, tools or []


def _tool_call(action) -> tuple[str, object] | None:
    """(name, raw arguments) when the action is a tool call ({"tool"|"name": str, "arguments": ...})."""
    if not isinstance(action, dict):
        return None
    name = action.get("tool") or action.get("name")
    if not isinstance(name, str):
        return None
    return name, action.get("arguments", {})


def rebuilt_transcript(head: dict, row: dict, steps) -> list[dict]:
    """The transcript of an agent that kept no record (random, scripted, human): the first
    observation as the user turn, each action an assistant tool call (or plain content) answered by
    its result; a rejected action is answered by its error, as a model agent would have been."""
    messages = [
        {"role": "system", "content": f"You act in the environment {head['version']} (task {row['task_id']})."},
        {"role": "user", "content": tool_result_message("", row["initial_observation"])["content"]},
    ]
    for index, action, observation, info in steps:
        error = info.get("agent_error") if isinstance(info, dict) else None
        call = _tool_call(action)
        if call is not None:
            call_id = f"call_{index}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": call[0], "arguments": call[1]}},
            ]})
            messages.append(step_error_message(call_id, error) if error else tool_result_message(call_id, observation))
        else:
            messages.append({"role": "assistant", "content": json.dumps(action, ensure_ascii=False)})
            text = step_error_message(None, error)["content"] if error else tool_result_message("", observation)["content"]
            messages.append({"role": "user", "content": text})
    return messages


def chat_row(head: dict, row: dict, steps, label, annotations, *, arguments: str = "object") -> dict:
    """The chat export row of one rollout. `steps`: (index, action, observation, info), parsed."""
    reproduction = row.get("reproduction") or {}
    recorded = recorded_transcript(steps, reproduction.get("agent_last_turn"))
    if recorded is not None:
        messages, tools = recorded
        source = "recorded"
    else:
        messages = rebuilt_transcript(head, row, steps)
        tools = reproduction.get("tools") or head["tools"] or []
        source = "rebuilt"
    return {
        "messages": [chat_message(message, arguments) for message in messages],
        "tools": function_tools(tools),
        "reward": label[0]["value"] if label else row["verifier_reward"],
        "metadata": {
            "environment": head["environment"], "version": head["version"], "content_hash": head["content_hash"],
            "agent": head["agent"]["name"], "agent_kind": head["agent"]["kind"], "rollout_id": row["id"],
            "run_id": row["run_id"], "task_id": row["task_id"], "seed": row["seed"], "status": row["status"],
            "end_reason": row["end_reason"], "verifier_reward": row["verifier_reward"],
            "verifier_reason": row["verifier_reason"],
            "label": None if label is None else {"value": label[0]["value"], "decision": label[0]["decision"]},
            "tags": sorted({tag for note in annotations for tag in note["tags"]}),
            # "recorded": the messages the model was sent; "rebuilt": made from the steps of an agent without a record.
            "transcript": source,
            "error_steps": [index for index, _, _, info in steps if isinstance(info, dict) and info.get("agent_error")],
        },
    }
