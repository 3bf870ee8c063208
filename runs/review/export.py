"""Streamed export of reviewed rollouts as JSON lines: one rollout a line, with its steps, current
label and annotations ("trajectory"), or as chat messages with tool calls for fine-tuning ("chat").

Memory stays flat: rollouts are read in id-ordered chunks (keyset), each chunk's steps, labels and
annotations in one query apiece, and each line is yielded as soon as it is written. Step JSON
columns travel as PostgreSQL's text and are spliced in without being parsed.
"""
import json
from collections.abc import Iterator

from django.db import connection

from ..artifacts import arrays_inline
from ..models import LabelDecision, Run
from ..selectors import with_current_label
from .selectors import rollouts_owed_by

EXPORT_DECISIONS = ("approved", "overridden", "all")
EXPORT_FORMATS = ("trajectory", "chat")
# "approved" exports what a trainer may use: approved labels and overrides (a human gave the value).
DECISION_FILTER = {
    "approved": (LabelDecision.APPROVED, LabelDecision.OVERRIDDEN),
    "overridden": (LabelDecision.OVERRIDDEN,),
    "all": None,
}
CHUNK_ROLLOUTS = 200
CHUNK_STEPS = 20_000

ROLLOUT_FIELDS = (
    "id", "run_id", "task_id", "seed", "repeat", "status", "end_reason", "total_reward", "verifier_reward",
    "verifier_reason", "initial_observation", "reset_info", "step_count",
)
STEPS_SQL = (
    "SELECT rollout_id, index, action::text, observation::text, reward, terminated, truncated, info::text "
    "FROM runs_step WHERE rollout_id = ANY(%s) ORDER BY rollout_id, index"
)
LABELS_SQL = (
    "SELECT DISTINCT ON (l.rollout_id) l.rollout_id, l.value, l.decision, l.source, l.rationale, u.username, l.created_at "
    "FROM runs_rewardlabel l LEFT JOIN auth_user u ON u.id = l.reviewer_id "
    "WHERE l.rollout_id = ANY(%s) AND l.step_id IS NULL ORDER BY l.rollout_id, l.created_at DESC, l.id DESC"
)
# Rollouts the exporting reviewer still owes a blind review: only the verifier's labels count (see
# selectors.rollouts_owed_by; a reviewer who owes one has no label of their own on it yet).
BLIND_LABELS_SQL = LABELS_SQL.replace("AND l.step_id IS NULL", "AND l.step_id IS NULL AND l.source = 'verifier'")
ANNOTATIONS_SQL = (
    "SELECT a.rollout_id, s.index, a.text, a.tags, u.username, a.created_at FROM runs_annotation a "
    "LEFT JOIN runs_step s ON s.id = a.step_id LEFT JOIN auth_user u ON u.id = a.author_id "
    "WHERE a.rollout_id = ANY(%s) ORDER BY a.rollout_id, a.created_at, a.id"
)


class InvalidExport(ValueError):
    pass


def export_rollouts(rollouts, *, decision: str = "approved", viewer=None):
    """Narrow a rollout queryset to those whose current label matches `decision`. For a `viewer` who
    still owes a blind review of a rollout, its current label is the verifier's proposal, which no
    human decision filter matches: the export neither shows nor implies the others' decisions."""
    if decision not in DECISION_FILTER:
        raise InvalidExport(f"decision must be one of {', '.join(EXPORT_DECISIONS)}")
    wanted = DECISION_FILTER[decision]
    if wanted is not None:
        # What a trainer may use has a reward: a label without a value never leaves as approved.
        rollouts = with_current_label(rollouts).filter(current_label_decision__in=wanted, current_label_value__isnull=False)
        if viewer is not None:
            rollouts = rollouts.exclude(pk__in=rollouts_owed_by(viewer=viewer, rollouts=rollouts).values("pk"))
    return rollouts


def export_lines(rollouts, *, decision: str = "approved", fmt: str = "trajectory", viewer=None) -> Iterator[str]:
    """Yield one JSON line ("...\\n") per rollout of the queryset whose current label matches, as
    `viewer` may see it (None: an operator's export, every label)."""
    if fmt not in EXPORT_FORMATS:
        raise InvalidExport(f"format must be one of {', '.join(EXPORT_FORMATS)}")
    rollouts = export_rollouts(rollouts, decision=decision, viewer=viewer)
    heads: dict[int, dict] = {}
    write = _trajectory_line if fmt == "trajectory" else _chat_line
    for chunk in _chunks(rollouts):
        ids = [row["id"] for row in chunk]
        for run_id in {row["run_id"] for row in chunk} - heads.keys():
            heads[run_id] = _run_head(run_id)
        blind = set(rollouts_owed_by(viewer=viewer, rollouts=rollouts.filter(pk__in=ids)).values_list("pk", flat=True)) if viewer else set()
        labels, annotations = _labels_and_annotations(ids, blind)
        with connection.cursor() as cursor:
            cursor.execute(STEPS_SQL, [ids])
            rows = iter(cursor)  # a client-side cursor: the chunk (capped by CHUNK_STEPS) is what it holds
            pending = None
            for row in chunk:
                steps = []
                if pending is not None and pending[0] == row["id"]:
                    steps.append(pending)
                    pending = None
                if pending is None:
                    for step in rows:
                        if step[0] != row["id"]:
                            pending = step
                            break
                        steps.append(step)
                yield write(heads[row["run_id"]], row, steps, labels.get(row["id"]), annotations.get(row["id"], []))


def _chunks(rollouts) -> Iterator[list[dict]]:
    """Rollouts in id order, a chunk at a time, each chunk capped by rollouts and by steps."""
    last_id = 0
    base = rollouts.order_by("id").values(*ROLLOUT_FIELDS)
    while True:
        page = list(base.filter(id__gt=last_id)[:CHUNK_ROLLOUTS])
        if not page:
            return
        chunk, steps = [], 0
        for row in page:
            if chunk and steps + row["step_count"] > CHUNK_STEPS:
                break
            chunk.append(row)
            steps += row["step_count"]
        last_id = chunk[-1]["id"]
        yield chunk


def _run_head(run_id: int) -> dict:
    run = Run.objects.select_related("environment_version__environment", "agent").get(pk=run_id)
    version = run.environment_version
    return {
        "environment": version.environment.slug,
        "version": version.label,
        "version_number": version.number,
        "content_hash": version.content_hash,
        "agent": {"name": run.agent.name, "kind": run.agent.kind, "code_hash": run.agent.code_hash},
        "tools": version.manifest.get("tools") or None,
    }


def _labels_and_annotations(ids: list[int], blind: set[int]) -> tuple[dict, dict]:
    labels, annotations = {}, {}
    with connection.cursor() as cursor:
        for sql, chosen in ((LABELS_SQL, [i for i in ids if i not in blind]), (BLIND_LABELS_SQL, sorted(blind))):
            if not chosen:
                continue
            cursor.execute(sql, [chosen])
            for rollout_id, value, decision, source, rationale, reviewer, created_at in cursor:
                labels[rollout_id] = (
                    {"value": value, "decision": decision, "source": source},
                    {"reviewer": reviewer, "rationale": rationale, "at": created_at.isoformat()},
                )
        cursor.execute(ANNOTATIONS_SQL, [ids])
        for rollout_id, step_index, text, tags, author, created_at in cursor:
            annotations.setdefault(rollout_id, []).append(
                {"step": step_index, "text": text, "tags": list(tags), "author": author, "at": created_at.isoformat()}
            )
    return labels, annotations


def _dump(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_text(text: str | None) -> str:
    return "null" if text is None else text


def _observation_text(rollout_id: int, text: str | None) -> str:
    """An observation's JSON text, with any stored arrays read back inline (an export is
    self-contained: it holds the very arrays the agent saw). Only those observations are parsed."""
    if text is None or '"artifact"' not in text or '"__ndarray__"' not in text:
        return _json_text(text)
    return _dump(arrays_inline(json.loads(text), rollout_id=rollout_id))


def _trajectory_line(head, row, steps, label, annotations) -> str:
    meta = {
        "environment": head["environment"],
        "version": head["version"],
        "content_hash": head["content_hash"],
        "agent": head["agent"],
        "rollout_id": row["id"],
        "run_id": row["run_id"],
        "task_id": row["task_id"],
        "seed": row["seed"],
        "repeat": row["repeat"],
        "status": row["status"],
        "end_reason": row["end_reason"],
        "total_reward": row["total_reward"],
        "verifier_reward": row["verifier_reward"],
        "verifier_reason": row["verifier_reason"],
        "label": label[0] if label else None,
        # Who gave the current label, when and why (the full trail is GET /rollouts/{id}/labels).
        "label_by": label[1] if label else None,
        "annotations": annotations,
        "initial_observation": arrays_inline(row["initial_observation"], rollout_id=row["id"]),
        "reset_info": row["reset_info"],
    }
    step_text = ",".join(
        f'{{"index":{index},"action":{_json_text(action)},"observation":{_observation_text(row["id"], observation)},'
        f'"reward":{_dump(reward)},"terminated":{"true" if terminated else "false"},'
        f'"truncated":{"true" if truncated else "false"},"info":{_json_text(info)}}}'
        for _, index, action, observation, reward, terminated, truncated, info in steps
    )
    return _dump(meta)[:-1] + ',"steps":[' + step_text + "]}\n"


def _tool_call(action) -> tuple[str, dict] | None:
    """(name, arguments) when the action is a tool call ({"tool"|"name": str, "arguments": {...}})."""
    if not isinstance(action, dict):
        return None
    name = action.get("tool") or action.get("name")
    arguments = action.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    return name, arguments


def _chat_line(head, row, steps, label, annotations) -> str:
    """OpenAI-style chat: the observation as the user turn, each action an assistant tool call
    (or plain content when the env takes no tool calls) answered by a tool (or user) message."""
    messages = [
        {"role": "system", "content": f"You act in the environment {head['version']} (task {row['task_id']})."},
        {"role": "user", "content": _dump(arrays_inline(row["initial_observation"], rollout_id=row["id"]))},
    ]
    for _, index, action_text, observation_text, *_rest in steps:
        observation_text = _observation_text(row["id"], observation_text)
        action = json.loads(action_text) if action_text is not None else None
        call = _tool_call(action)
        if call is not None:
            call_id = f"call_{index}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": call[0], "arguments": _dump(call[1])}},
            ]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": observation_text or "null"})
        else:
            messages.append({"role": "assistant", "content": _dump(action)})
            messages.append({"role": "user", "content": observation_text or "null"})
    line = {
        "messages": messages,
        "reward": label[0]["value"] if label else row["verifier_reward"],
        "metadata": {
            "environment": head["environment"], "version": head["version"], "content_hash": head["content_hash"],
            "agent": head["agent"]["name"], "rollout_id": row["id"], "run_id": row["run_id"], "task_id": row["task_id"],
            "seed": row["seed"], "verifier_reward": row["verifier_reward"],
            "label": None if label is None else {"value": label[0]["value"], "decision": label[0]["decision"]},
            "tags": sorted({tag for note in annotations for tag in note["tags"]}),
        },
    }
    if head["tools"]:
        line["tools"] = head["tools"]
    return _dump(line) + "\n"
