"""REST endpoints for review: the queue and its next item, label decisions and history,
annotations, agreement figures and streamed JSONL export (the same services as the pages)."""
from typing import Literal

from django.http import StreamingHttpResponse
from ninja import Query, Router, Schema, Status

from environments.selectors import environment_get, version_get
from studio.auth import require
from studio.inputs import BIGINT_MAX

from ..models import Rollout
from .. import labels as layers
from .. import selectors as run_selectors
from . import selectors, services
from .export import ExportFilter
from .export_http import export_response
from .schemas import AgreementOut, AnnotationIn, AnnotationOut, LabelHistoryOut, LabelIn, LabelOut, NextOut, QueuePage

router = Router(tags=["review"])


class QueueQuery(Schema):
    environment: str | None = None
    version: int | None = None
    run: int | None = None
    agent: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    outcome: Literal["pass", "fail"] | None = None
    disagreement: bool = False  # rollouts where a newer verifier disagrees with the human decision, decided or not
    # Rollouts of runs of this purpose: evaluations unless asked (ignored when `run` names one).
    purpose: Literal["evaluation", "audit", "reverify", "session", "play", "all"] = "evaluation"

    def filters(self) -> selectors.QueueFilters:
        return selectors.QueueFilters(
            environment=self.environment, version=self.version, run_id=self.run, agent_id=self.agent,
            min_reward=self.min_reward, max_reward=self.max_reward, verifier_outcome=self.outcome,
            disagreement=self.disagreement, purpose=None if self.purpose == "all" else self.purpose,
        )


def _rollout(request, rollout_id) -> Rollout:
    return run_selectors.rollout_get(team=request.team, rollout_id=rollout_id)


def _step(rollout, step_index):
    if step_index is None:
        return None
    step = run_selectors.step_at(rollout=rollout, index=step_index)
    if step is None:
        raise services.InvalidDecision(f"Rollout {rollout.pk} has no step {step_index}.", field="step_index")
    return step


def _queue_item(r: Rollout) -> dict:
    version = r.run.environment_version
    return {
        "id": r.pk, "run_id": r.run_id, "environment": version.environment.slug, "version": version.label,
        "agent": r.run.agent.name, "task_id": r.task_id, "seed": r.seed, "status": r.status, "step_count": r.step_count,
        "proposed_reward": r.proposed_reward, "verifier_reason": r.verifier_reason,
        "reviews_required": max(1, r.run.reviews_required), "reviews_done": r.human_deciders,
        "disagreement": r.in_disagreement,
    }


def _label_out(label) -> dict:
    return {
        "id": label.pk, "rollout_id": label.rollout_id, "step_index": label.step.index if label.step_id else None,
        "source": label.source, "decision": label.decision, "value": label.value,
        "reviewer": label.reviewer.username if label.reviewer_id else None, "rationale": label.rationale,
        "created_at": label.created_at, "verifier_version_id": label.verifier_version_id,
    }


def _annotation_out(note) -> dict:
    return {
        "id": note.pk, "rollout_id": note.rollout_id, "step_index": note.step.index if note.step_id else None,
        "author": note.author.username if note.author_id else None, "text": note.text, "tags": note.tags,
        "created_at": note.created_at,
    }


class BulkIn(Schema):
    decision: Literal["approved", "rejected"]
    rationale: str = ""


class BulkRefusal(Schema):
    rollout_id: int
    reason: str


class BulkOut(Schema):
    decision: str
    decided: list[int]
    refused: list[BulkRefusal]


@router.post("/review/bulk", response=BulkOut)
def review_bulk(request, query: Query[QueueQuery], payload: BulkIn):
    """Approve or reject every rollout of your (filtered) queue, at most 500 a call, by the rules of a
    single decision: refusals (no reward to approve, already decided) come back with their reasons."""
    require(request, "review")
    queue = selectors.review_queue(team=request.team, reviewer=request.user, filters=query.filters())
    return services.labels_decide_bulk(
        team=request.team, rollouts=queue, actor=request.user, decision=payload.decision, rationale=payload.rationale,
    )


@router.get("/review/queue", response=QueuePage)
def review_queue(request, query: Query[QueueQuery], limit: int = Query(50, le=BIGINT_MAX),
                 offset: int = Query(0, ge=0, le=BIGINT_MAX), after: int | None = Query(None, ge=0, le=BIGINT_MAX)):
    """Rollouts waiting for your decision, in the order "next" walks them (oldest first). Page with
    `after` (the last rollout id of the previous page: any page costs the same) or `offset`."""
    limit, offset = max(1, min(limit, 500)), max(0, offset)
    page = selectors.review_queue_page(team=request.team, reviewer=request.user, filters=query.filters(), after=after,
                                       offset=offset, limit=limit)
    count = selectors.review_queue_count(team=request.team, reviewer=request.user, filters=query.filters())
    return {"count": count, "offset": offset, "limit": limit, "items": [_queue_item(r) for r in page]}


@router.get("/review/next", response=NextOut)
def review_next(request, query: Query[QueueQuery], after: int | None = None, count: bool = False):
    """The next rollout to review after rollout `after` (wrapping round to skipped ones); null when done."""
    item = selectors.next_in_queue(team=request.team, reviewer=request.user, after_rollout_id=after, filters=query.filters())
    remaining = None
    if count:
        remaining = selectors.review_queue_count(team=request.team, reviewer=request.user, filters=query.filters())
    return {"item": _queue_item(item) if item else None, "remaining": remaining}


@router.get("/rollouts/{rollout_id}/labels", response=LabelHistoryOut)
def rollout_labels(request, rollout_id: int):
    """The label history, oldest first; while your independent review is owed, others' decisions are hidden."""
    rollout = _rollout(request, rollout_id)
    labels = selectors.visible_labels(rollout, request.user)
    rollout_level = [label for label in labels if label.step_id is None]
    current = layers.current_label_of(rollout_level, own_version_id=rollout.run.environment_version_id)
    return {
        "rollout_id": rollout.pk, "reviews_required": max(1, rollout.run.reviews_required),
        "review_open_for_you": selectors.review_open_for(rollout, request.user),
        "current": _label_out(current) if current else None,
        "disagreement": layers.in_disagreement(rollout_level, own_version_id=rollout.run.environment_version_id),
        "history": [_label_out(label) for label in labels],
    }


@router.post("/rollouts/{rollout_id}/labels", response={201: LabelOut})
def decide_label(request, rollout_id: int, payload: LabelIn):
    """Approve, reject or override the proposed reward (owners and reviewers). Appends; never edits."""
    require(request, "review")
    rollout = _rollout(request, rollout_id)
    label = services.label_decide(
        rollout=rollout, actor=request.user, decision=payload.decision, value=payload.value,
        rationale=payload.rationale, step=_step(rollout, payload.step_index),
    )
    return Status(201, _label_out(label))


@router.get("/rollouts/{rollout_id}/annotations", response=list[AnnotationOut])
def rollout_annotations(request, rollout_id: int):
    return [_annotation_out(n) for n in selectors.annotations_for(rollout=_rollout(request, rollout_id))]


@router.post("/rollouts/{rollout_id}/annotations", response={201: AnnotationOut})
def add_annotation(request, rollout_id: int, payload: AnnotationIn):
    """A note with tags (e.g. reward-hack, env-bug, ambiguous-task) on the rollout or one step."""
    if not (request.membership.can("review") or request.membership.can("author")):
        require(request, "review")
    rollout = _rollout(request, rollout_id)
    note = services.annotation_add(
        rollout=rollout, actor=request.user, text=payload.text, tags=payload.tags, step=_step(rollout, payload.step_index),
    )
    return Status(201, _annotation_out(note))


def _version(request, slug, number):
    return version_get(environment=environment_get(team=request.team, slug=slug), number=number)


@router.get("/environments/{slug}/versions/{number}/annotations", response=list[AnnotationOut])
def version_annotations(request, slug: str, number: int, tag: str = "", limit: int = Query(200, le=BIGINT_MAX), offset: int = Query(0, ge=0, le=BIGINT_MAX)):
    notes = selectors.annotations_for(version=_version(request, slug, number), tag=tag or None)
    limit, offset = max(1, min(limit, 1000)), max(0, offset)
    return [_annotation_out(n) for n in notes[offset : offset + limit]]


@router.get("/environments/{slug}/versions/{number}/agreement", response=AgreementOut)
def version_agreement(request, slug: str, number: int):
    """Verifier vs human and human vs human agreement on pass/fail (pass = reward > 0), overrides, tags."""
    return selectors.agreement(version=_version(request, slug, number), viewer=request.user)


@router.get("/runs/{run_id}/agreement", response=AgreementOut)
def run_agreement(request, run_id: int):
    return selectors.agreement(run=run_selectors.run_get(team=request.team, run_id=run_id), viewer=request.user)


Decision = Literal["approved", "overridden", "rejected", "proposed", "all"]
Format = Literal["trajectory", "chat", "atif", "inspect"]
Arguments = Literal["object", "string"]
File = Literal["jsonl", "parquet"]


class ExportQuery(Schema):
    decision: Decision = "approved"
    format: Format = "trajectory"
    arguments: Arguments = "object"
    file: File = "jsonl"

    def export_filter(self, *, min_reward=None, max_reward=None) -> ExportFilter:
        return ExportFilter(decision=self.decision, min_reward=min_reward, max_reward=max_reward)


def _stream(request, rollouts, *, query: ExportQuery, filters: ExportFilter, filename) -> StreamingHttpResponse:
    """The download, labels as the caller may see them; an export that matches nothing is an empty
    file with `X-Export-Count: 0`."""
    return export_response(rollouts, filters=filters, fmt=query.format, arguments=query.arguments, file=query.file,
                           filename=filename, viewer=request.user)


@router.get("/runs/{run_id}/export", response={200: None})
def export_run(request, run_id: int, query: Query[ExportQuery], min_reward: float | None = None,
               max_reward: float | None = None):
    """The run's rollouts, streamed. decision: the current label (approved = approved or overridden),
    min_reward/max_reward: the exported reward (the current label's value, else the verifier's);
    format: trajectory, chat, atif (one ATIF trajectory a line, Harbor's format), or inspect (an Inspect AI .json log); arguments (chat): tool-call
    arguments as objects or JSON strings; file: jsonl or parquet. `X-Export-Count` says how many rollouts the file holds."""
    run = run_selectors.run_get(team=request.team, run_id=run_id)
    filters = query.export_filter(min_reward=min_reward, max_reward=max_reward)
    return _stream(request, run.rollouts.all(), query=query, filters=filters, filename=f"run-{run.pk}")


@router.get("/environments/{slug}/versions/{number}/export", response={200: None})
def export_version(request, slug: str, number: int, query: Query[ExportQuery], min_reward: float | None = None,
                   max_reward: float | None = None):
    """The version's rollouts, with the parameters of GET /runs/{run_id}/export."""
    version = _version(request, slug, number)
    rollouts = run_selectors.rollouts_of_version(team=request.team, version=version)
    filters = query.export_filter(min_reward=min_reward, max_reward=max_reward)
    return _stream(request, rollouts, query=query, filters=filters, filename=f"{slug}-v{number}")


@router.get("/review/export", response={200: None})
def export_filtered(request, queue: Query[QueueQuery], query: Query[ExportQuery]):
    """Export the team's rollouts matching the queue filters (environment, version, run, agent, the
    verifier's proposed reward, outcome), with the label and file parameters of GET /runs/{run_id}/export."""
    rollouts = selectors.rollouts_matching(team=request.team, filters=queue.filters())
    return _stream(request, rollouts, query=query, filters=query.export_filter(), filename=f"{request.team.slug}-rollouts")
