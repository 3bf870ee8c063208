"""Rollouts as an Inspect AI log (the `.json` log format `inspect view` and `read_eval_log` read):
one EvalSample per rollout, its messages the chat export's transcript, its score the exported
reward with the verifier's reason. An Inspect log is one document, so it is built whole: a large
export is better taken as JSONL or Parquet."""
import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalLog,
    EvalMetric,
    EvalResults,
    EvalSample,
    EvalScore,
    EvalSpec,
    write_eval_log,
)
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser
from inspect_ai.scorer import Score
from inspect_ai.tool import ToolCall

from ..review.export import ExportFilter, export_lines

SCORER = "studio_verifier"


def _sample(row: dict, messages) -> EvalSample:
    meta = row["metadata"]
    first_user = next((m["content"] for m in row["messages"] if m["role"] == "user"), "") or ""
    reward = row["reward"]
    return EvalSample(
        id=meta["rollout_id"], epoch=1, input=first_user, target="", messages=messages,
        metadata=meta,
        scores={SCORER: Score(value=reward if reward is not None else 0.0, explanation=meta["verifier_reason"] or None,
                              metadata={"label": meta["label"], "status": meta["status"]})},
    )


def inspect_messages(messages: list[dict], *, model: str) -> list:
    """Chat-export messages (arguments as objects) as Inspect's chat messages."""
    out, names = [], {}
    for message in messages:
        role, content = message["role"], message["content"] or ""
        if role == "system":
            out.append(ChatMessageSystem(content=content))
        elif role == "user":
            out.append(ChatMessageUser(content=content))
        elif role == "assistant":
            calls = [ToolCall(id=call["id"], function=call["function"]["name"], arguments=call["function"]["arguments"])
                     for call in message["tool_calls"] or []]
            names.update({call.id: call.function for call in calls})
            out.append(ChatMessageAssistant(content=content, tool_calls=calls or None, model=model))
        elif role == "tool":
            out.append(ChatMessageTool(content=content, tool_call_id=message["tool_call_id"],
                                       function=names.get(message["tool_call_id"])))
    return out


def inspect_log(rollouts, *, filters: ExportFilter, viewer=None) -> EvalLog:
    """The Inspect log of the rollouts the filter admits, with labels as `viewer` may see them."""
    rows = [json.loads(line) for line in export_lines(rollouts, filters=filters, fmt="chat", arguments="object", viewer=viewer)]
    samples = [_sample(row, inspect_messages(row["messages"], model=f"studio/{row['metadata']['agent']}")) for row in rows]
    versions = sorted({row["metadata"]["version"] for row in rows})
    agents = sorted({row["metadata"]["agent"] for row in rows})
    rewards = [row["reward"] for row in rows if row["reward"] is not None]
    spec = EvalSpec(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        task=f"studio/{versions[0]}" if len(versions) == 1 else "studio/export",
        dataset=EvalDataset(name=", ".join(versions) or "studio", samples=len(samples)),
        model=f"studio/{agents[0]}" if len(agents) == 1 else "studio/mixed",
        config=EvalConfig(),
        metadata={"versions": versions, "agents": agents, "filter": filters.describe()},
    )
    results = EvalResults(
        total_samples=len(samples), completed_samples=len(samples),
        scores=[EvalScore(name=SCORER, scorer=SCORER, metrics={
            "mean": EvalMetric(name="mean", value=sum(rewards) / len(rewards) if rewards else 0.0),
        })],
    )
    return EvalLog(eval=spec, status="success", samples=samples, results=results)


def inspect_log_bytes(rollouts, *, filters: ExportFilter, viewer=None) -> bytes:
    """The log as the bytes of an Inspect `.json` log file, written by Inspect's own writer."""
    log = inspect_log(rollouts, filters=filters, viewer=viewer)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "studio.json"
        write_eval_log(log, str(path), format="json")
        return path.read_bytes()
