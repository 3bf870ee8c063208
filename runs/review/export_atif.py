"""The ATIF export of one rollout: Harbor's Agent Trajectory Interchange Format (RFC 0001, the
`harbor.models.trajectories` models), one trajectory per rollout.

The steps come from the chat transcript (export_chat.py), so a model agent's trajectory is what the
model was sent and said: system and user turns are their own steps, each assistant message is an
`agent` step with all its tool calls, and the tool results it read are that step's observation.
Studio facts that ATIF has no field for ride in its `extra` objects: the rollout's identity and label
at the root, the agent's kind, each tool result's studio step with its reward, and the exported
reward in `final_metrics.extra.reward`.
"""
from .export_chat import chat_row

SCHEMA_VERSION = "ATIF-v1.8"


def _call_steps(steps) -> dict[str, dict]:
    """Studio step facts by the call id the transcript gives that step's call: a model agent's record
    names it (info.agent.call_id), a rebuilt transcript calls it call_<index>."""
    facts = {}
    for index, _action, _observation, reward, terminated, truncated, info in steps:
        fact = {"studio_step": index, "reward": reward, "terminated": terminated, "truncated": truncated}
        facts[f"call_{index}"] = fact
        record = info.get("agent") if isinstance(info, dict) else None
        if isinstance(record, dict) and isinstance(record.get("call_id"), str):
            facts[record["call_id"]] = fact
    return facts


def atif_steps(messages: list[dict], call_steps: dict[str, dict]) -> list[dict]:
    """Chat messages (arguments as objects) as ATIF steps, numbered from 1."""
    steps: list[dict] = []
    for message in messages:
        role, content = message["role"], message["content"] or ""
        if role == "tool":
            owner = steps[-1] if steps and steps[-1]["source"] == "agent" else None
            if owner is None:  # a result with no call before it: kept, as the user turn it was for the model
                steps.append({"source": "user", "message": content})
                continue
            call_id = message["tool_call_id"]
            ids = {call["tool_call_id"] for call in owner.get("tool_calls") or []}
            result = {"source_call_id": call_id if call_id in ids else None, "content": content}
            if call_id in call_steps:
                result["extra"] = call_steps[call_id]
            owner.setdefault("observation", {"results": []})["results"].append(result)
            continue
        step = {"source": "agent" if role == "assistant" else ("system" if role == "system" else "user"), "message": content}
        if role == "assistant" and message["tool_calls"]:
            step["tool_calls"] = [
                {"tool_call_id": call["id"], "function_name": call["function"]["name"],
                 "arguments": call["function"]["arguments"]}
                for call in message["tool_calls"]
            ]
        steps.append(step)
    if not steps:
        steps.append({"source": "system", "message": ""})  # ATIF needs one step; a transcript always has its system turn
    return [{"step_id": number, **step} for number, step in enumerate(steps, start=1)]


def atif_row(head: dict, row: dict, steps, label, annotations) -> dict:
    """The ATIF trajectory of one rollout. `steps`: (index, action, observation, reward, terminated,
    truncated, info), parsed."""
    chat = chat_row(head, row, [(s[0], s[1], s[2], s[6]) for s in steps], label, annotations, arguments="object")
    meta = chat["metadata"]
    agent = {"name": head["agent"]["name"], "version": head["agent"]["code_hash"] or head["agent"]["kind"],
             "extra": {"kind": head["agent"]["kind"]}}
    if chat["tools"]:
        agent["tool_definitions"] = chat["tools"]
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": f"studio-run-{row['run_id']}",
        "trajectory_id": f"studio-rollout-{row['id']}",
        "agent": agent,
        "steps": atif_steps(chat["messages"], _call_steps(steps)),
        "final_metrics": {
            "total_steps": len(steps),
            "extra": {"reward": chat["reward"], "verifier_reward": row["verifier_reward"],
                      "total_reward": row["total_reward"]},
        },
        # ATIF's total_steps counts the studio's environment steps; the trajectory's steps are the transcript's turns.
        "notes": "final_metrics.total_steps counts environment steps; steps are the agent's transcript turns.",
        "extra": {"studio": {**meta, "annotations": annotations}},
    }
