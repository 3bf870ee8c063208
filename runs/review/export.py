"""Streamed export of reviewed rollouts as JSON lines: one rollout a line, with its steps, current
label and annotations ("trajectory"), as chat messages with tool calls for fine-tuning ("chat"), or
as an ATIF trajectory, Harbor's interchange format ("atif").

Memory stays flat: rollouts are read in id-ordered chunks (keyset), each chunk's steps, labels and
annotations in one query apiece, and each line is yielded as soon as it is written. Step JSON
columns travel as PostgreSQL's text and are spliced in without being parsed.
"""
import json
from collections.abc import Iterator

from dataclasses import dataclass

from django.db import connection
from django.db.models import Case, F, Q, When
from django.db.models.functions import Coalesce

from environments.selectors import without_version_content
from studio.errors import DomainError

from ..artifacts import arrays_inline
from ..models import LabelDecision, Run
from ..selectors import with_current_label
from .export_atif import atif_row
from .export_chat import ARGUMENT_MODES, chat_row
from .selectors import rollouts_owed_by

EXPORT_DECISIONS = ("approved", "overridden", "rejected", "proposed", "all")
EXPORT_FORMATS = ("trajectory", "chat", "atif")
# "approved" exports what a trainer may use: approved labels and overrides (a human gave the value).
DECISION_FILTER = {
    "approved": (LabelDecision.APPROVED, LabelDecision.OVERRIDDEN),
    "overridden": (LabelDecision.OVERRIDDEN,),
    "rejected": (LabelDecision.REJECTED,),
    "proposed": (LabelDecision.PROPOSED,),
    "all": None,
}
CHUNK_ROLLOUTS = 200
CHUNK_STEPS = 20_000

ROLLOUT_FIELDS = (
    "id", "run_id", "task_id", "seed", "repeat", "status", "end_reason", "total_reward", "verifier_reward",
    "verifier_reason", "initial_observation", "reset_info", "step_count", "reproduction",
)
STEPS_SQL = (
    "SELECT rollout_id, index, action::text, observation::text, reward, terminated, truncated, info::text "
    "FROM runs_step WHERE rollout_id = ANY(%s) ORDER BY rollout_id, index"
)
# The current label of each rollout (runs.labels; runs_current_label_of in runs/sql/label_layers.sql).
LABELS_SQL = (
    "SELECT l.rollout_id, l.value, l.decision, l.source, l.rationale, u.username, l.created_at "
    "FROM unnest(%s::bigint[]) AS rid CROSS JOIN LATERAL runs_current_label_of(rid) l "
    "LEFT JOIN auth_user u ON u.id = l.reviewer_id"
)
# Rollouts the exporting reviewer still owes a blind review: only the verifier's proposal counts (see
# selectors.rollouts_owed_by; a reviewer who owes one has no label of their own on it yet).
BLIND_LABELS_SQL = LABELS_SQL.replace("runs_current_label_of", "runs_proposal_of")
ANNOTATIONS_SQL = (
    "SELECT a.rollout_id, s.index, a.text, a.tags, u.username, a.created_at FROM runs_annotation a "
    "LEFT JOIN runs_step s ON s.id = a.step_id LEFT JOIN auth_user u ON u.id = a.author_id "
    "WHERE a.rollout_id = ANY(%s) ORDER BY a.rollout_id, a.created_at, a.id"
)


class InvalidExport(DomainError):
    """An export request that cannot be met (a 400 naming the parameter at fault)."""


@dataclass(frozen=True)
class ExportFilter:
    """Which rollouts an export holds: by the current label's decision and by the reward the export
    gives each rollout (its current label's value, else the verifier's reward), both ends inclusive."""

    decision: str = "approved"
    min_reward: float | None = None
    max_reward: float | None = None

    def __post_init__(self):
        if self.decision not in DECISION_FILTER:
            raise InvalidExport(f"decision must be one of {', '.join(EXPORT_DECISIONS)}, not {self.decision!r}", field="decision")
        if self.min_reward is not None and self.max_reward is not None and self.min_reward > self.max_reward:
            raise InvalidExport(f"min_reward ({self.min_reward:g}) is above max_reward ({self.max_reward:g})", field="min_reward")

    def describe(self) -> str:
        """The filter in words, for "0 rollouts match ..." messages."""
        words = {"approved": "approved or overridden", "all": "any label"}.get(self.decision, self.decision)
        if self.min_reward is not None and self.max_reward is not None:
            words += f", reward {self.min_reward:g} to {self.max_reward:g}"
        elif self.min_reward is not None:
            words += f", reward at least {self.min_reward:g}"
        elif self.max_reward is not None:
            words += f", reward at most {self.max_reward:g}"
        return words


def export_rollouts(rollouts, *, decision: str = "approved", filters: ExportFilter | None = None, viewer=None):
    """Narrow a rollout queryset to those the filter admits (by default: current label approved or
    overridden), as `viewer` may see them. For a viewer who still owes a blind review of a rollout,
    its label is the verifier's proposal and its reward the verifier's: no human decision filter
    matches it and no reward range reveals a human's value (None: an operator's export, every label)."""
    filters = filters or ExportFilter(decision=decision)
    wanted = DECISION_FILTER[filters.decision]
    owed = rollouts_owed_by(viewer=viewer, rollouts=rollouts).values("pk") if viewer is not None else None
    rollouts = with_current_label(rollouts)
    if wanted is not None:
        match = Q(current_label_decision__in=wanted)
        if owed is not None:
            match = (match & ~Q(pk__in=owed)) | (Q(pk__in=owed) if filters.decision == "proposed" else Q(pk__in=[]))
        rollouts = rollouts.filter(match)
    if filters.decision in ("approved", "overridden"):
        # What a trainer may use has a reward: a label without a value never leaves as approved.
        rollouts = rollouts.filter(current_label_value__isnull=False)
    if filters.min_reward is not None or filters.max_reward is not None:
        reward = Coalesce(F("current_label_value"), F("verifier_reward"))
        if owed is not None:
            reward = Case(When(pk__in=owed, then=Coalesce(F("verifier_reward"), F("total_reward"))), default=reward)
        rollouts = rollouts.annotate(export_reward=reward)
        if filters.min_reward is not None:
            rollouts = rollouts.filter(export_reward__gte=filters.min_reward)
        if filters.max_reward is not None:
            rollouts = rollouts.filter(export_reward__lte=filters.max_reward)
    return rollouts


def export_count(rollouts, *, filters: ExportFilter, viewer=None) -> int:
    return export_rollouts(rollouts, filters=filters, viewer=viewer).count()


def export_lines(rollouts, *, decision: str = "approved", fmt: str = "trajectory", filters: ExportFilter | None = None,
                 arguments: str = "object", viewer=None) -> Iterator[str]:
    """Yield one JSON line ("...\\n") per rollout of the queryset that the filter admits, as `viewer`
    may see it. `arguments` (chat): tool-call arguments as objects or as JSON strings."""
    if fmt not in EXPORT_FORMATS:
        raise InvalidExport(f"format must be one of {', '.join(EXPORT_FORMATS)}, not {fmt!r}", field="format")
    if arguments not in ARGUMENT_MODES:
        raise InvalidExport(f"arguments must be one of {', '.join(ARGUMENT_MODES)}, not {arguments!r}", field="arguments")
    rollouts = export_rollouts(rollouts, decision=decision, filters=filters, viewer=viewer)
    heads: dict[int, dict] = {}
    if fmt == "trajectory":
        write = _trajectory_line
    elif fmt == "atif":
        def write(head, row, steps, label, annotations):
            parsed = [(index, _parsed(action), _parsed(observation), reward, terminated, truncated, _parsed(info))
                      for _, index, action, observation, reward, terminated, truncated, info in steps]
            return _dump(atif_row(head, row, parsed, label, annotations)) + "\n"
    else:
        def write(head, row, steps, label, annotations):
            parsed = [(index, _parsed(action), _parsed(observation), _parsed(info))
                      for _, index, action, observation, _r, _t, _u, info in steps]
            return _dump(chat_row(head, row, parsed, label, annotations, arguments=arguments)) + "\n"
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


def _parsed(text: str | None):
    return None if text is None else json.loads(text)


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
    runs = Run.objects.select_related("environment_version__environment", "agent")
    run = without_version_content(runs, "environment_version").get(pk=run_id)
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
