"""REST endpoints for agents, runs, rollouts and steps (the same services as the pages)."""
from django.db.models import Q
from ninja import Query, Router, Status

from environments.selectors import version_by_label
from studio.auth import require
from studio.inputs import BIGINT_MAX

from . import figures, selectors, services
from .artifacts import arrays_public
from .review.selectors import visible_labels
from .seeds import parse_seeds
from .models import Run
from .schemas import (
    AgentDetailOut,
    AgentIn,
    AgentOut,
    ComparisonOut,
    RolloutDetailOut,
    RolloutOut,
    RunIn,
    RunOut,
    StepPage,
)

router = Router(tags=["runs"])


def _run_out(run: Run, summary: dict | None = None) -> dict:
    v = run.environment_version
    return {
        "id": run.pk, "environment": v.environment.slug, "version": v.label, "content_hash": v.content_hash,
        "agent": run.agent.name, "agent_id": run.agent_id, "status": run.status, "purpose": run.purpose,
        "task_ids": run.task_ids,
        "seeds": run.seeds, "repeats": run.repeats, "limits": run.limits, "reviews_required": run.reviews_required,
        "created_at": run.created_at, "finished_at": run.finished_at,
        "summary": summary if summary is not None else figures.run_figures(run),
    }


@router.get("/agents", response=list[AgentOut])
def list_agents(request):
    return list(selectors.agents_for_team(team=request.team))


@router.post("/agents", response={201: AgentDetailOut})
def create_agent(request, payload: AgentIn):
    require(request, "run")
    agent = services.agent_create(team=request.team, actor=request.user, **payload.dict())
    return Status(201, agent)


@router.get("/agents/{agent_id}", response=AgentDetailOut)
def get_agent(request, agent_id: int):
    return selectors.agent_get(team=request.team, agent_id=agent_id)


@router.get("/runs", response=list[RunOut])
def list_runs(request, limit: int = Query(50, le=BIGINT_MAX), offset: int = Query(0, ge=0, le=BIGINT_MAX),
              before: int | None = Query(None, ge=0, le=BIGINT_MAX), purpose: str = "", agent: str = "",
              version: str = "", status: str = "", created_from: str = "", created_to: str = "", q: str = ""):
    """The team's runs, newest first: evaluations unless `purpose` says otherwise (audit, reverify, session,
    play, or all), narrowed by `agent` (name or id), `version` (slug or slug@N), `status`, `created_from` and
    `created_to` (dates, inclusive) and `q` (a run number, or part of an agent's or environment's name), as
    the runs page filters them; a bad value is a 400 naming it. Page with `before` (the last run id of the
    previous page: any page costs the same) or `offset`."""
    limit = max(1, min(limit, 200))
    params = {"purpose": purpose, "agent": agent, "version": version, "status": status, "created_from": created_from,
              "created_to": created_to, "q": q}
    try:
        filters = selectors.run_filters_parse(team=request.team, params=params)
    except selectors.InvalidRunFilter as exc:
        raise services.InvalidRun(exc.message, field=exc.field) from None
    runs = selectors.runs_filtered(team=request.team, filters=filters)
    if before is not None:
        last = selectors.run_created_at(team=request.team, run_id=before)
        if last is None:
            raise services.InvalidRun(f"No run {before} in this team.", field="before")
        runs = runs.filter(Q(created_at__lt=last) | Q(created_at=last, pk__lt=before))
    runs = list(runs[offset : offset + limit])
    summaries = figures.runs_figures(runs)
    return [_run_out(run, summaries[run.pk]) for run in runs]


@router.post("/runs", response={201: RunOut})
def create_run(request, payload: RunIn):
    """Start a run: one rollout per task x seed x repeat, each a Celery task."""
    require(request, "run")
    version = version_by_label(team=request.team, label=payload.version)
    agent = services.agent_for_run(team=request.team, actor=request.user, version=version, reference=payload.agent)
    if isinstance(payload.seeds, str):
        try:
            seeds = parse_seeds(payload.seeds)
        except ValueError as exc:
            raise services.InvalidRun(str(exc), field="seeds") from None
    else:
        seeds = payload.seeds
    run = services.run_create(
        team=request.team, actor=request.user, version=version, agent=agent, task_ids=payload.task_ids,
        difficulties=payload.difficulties, seeds=seeds, repeats=payload.repeats, limits=payload.limits,
        reviews_required=payload.reviews_required, count=payload.count,
    )
    return Status(201, _run_out(selectors.run_get(team=request.team, run_id=run.pk)))


@router.get("/runs/compare")
def compare_runs(request, runs: str):
    """Runs side by side, task by task (`?runs=12,15`): each run's figures per task and overall, with
    each later run's difference from the first in success rate and mean return; what the comparison page shows."""
    try:
        chosen = selectors.runs_by_ids(team=request.team, text=runs)
    except ValueError as exc:
        raise services.InvalidRun(str(exc), field="runs") from None
    return figures.runs_compared(chosen)


@router.get("/runs/{run_id}", response=RunOut)
def get_run(request, run_id: int):
    return _run_out(selectors.run_get(team=request.team, run_id=run_id))


@router.post("/runs/{run_id}/cancel", response=RunOut)
def cancel_run(request, run_id: int):
    require(request, "run")
    run = selectors.run_get(team=request.team, run_id=run_id)
    services.run_cancel(run=run, actor=request.user)
    return _run_out(selectors.run_get(team=request.team, run_id=run.pk))


@router.get("/runs/{run_id}/rollouts", response=list[RolloutOut])
def list_rollouts(request, run_id: int, status: str = "", end_reason: str = Query("", max_length=16),
                  limit: int = Query(500, le=BIGINT_MAX), offset: int = Query(0, ge=0, le=BIGINT_MAX)):
    """The run's rollouts; `status` and `end_reason` filter them (end_reason=infra_error: those the
    studio's own machinery failed, whose rewards say nothing of the environment or the agent)."""
    run = selectors.run_get(team=request.team, run_id=run_id)
    qs = run.rollouts.order_by("id")
    if status:
        qs = qs.filter(status=status)
    if end_reason:
        qs = qs.filter(end_reason=end_reason)
    limit = max(1, min(limit, 2000))
    return list(qs[offset : offset + limit])


@router.get("/rollouts/{rollout_id}", response=RolloutDetailOut)
def get_rollout(request, rollout_id: int):
    r = selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    r.labels_list = [
        {"source": label.source, "decision": label.decision, "value": label.value, "rationale": label.rationale,
         "reviewer": label.reviewer.username if label.reviewer_id else None,
         "created_at": label.created_at.isoformat()}
        for label in visible_labels(r, request.user)
    ]
    out = RolloutOut.from_orm(r).dict()
    out.update(reproduction=r.reproduction, initial_observation=arrays_public(r.initial_observation, rollout_id=r.pk),
               reset_info=r.reset_info, labels=r.labels_list)
    return out


@router.get("/rollouts/{rollout_id}/steps", response=StepPage)
def get_steps(request, rollout_id: int, offset: int = Query(0, ge=0, le=BIGINT_MAX), limit: int = Query(100, le=BIGINT_MAX)):
    """Steps in index order, a page at a time (limit at most 1000): `offset` is the first step's index,
    so any page is one seek on the (rollout, index) key, however long the rollout; `count` is how many
    steps the rollout has stored (its step count, written with every batch of steps)."""
    r = selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    limit = max(1, min(limit, 1000))
    offset = max(0, offset)
    steps = list(r.steps.filter(index__gte=offset).order_by("index")[:limit])
    return {"count": r.step_count, "offset": offset, "limit": limit, "steps": steps}


@router.post("/rollouts/{rollout_id}/rerun", response={201: RolloutOut})
def rerun_rollout(request, rollout_id: int):
    """Run the same version, task, seed and agent again; compare with GET /rollouts/{new}/comparison."""
    require(request, "run")
    new = services.rollout_rerun(rollout=selectors.rollout_get(team=request.team, rollout_id=rollout_id), actor=request.user)
    return Status(201, new)


@router.get("/rollouts/{rollout_id}/comparison", response=ComparisonOut)
def compare_rerun(request, rollout_id: int):
    """For a rerun: is its trajectory identical to the original's, and if not, where does it diverge."""
    r = selectors.rollout_get(team=request.team, rollout_id=rollout_id)
    if r.rerun_of_id is None:
        raise services.InvalidRun("This rollout is not a rerun.", field="rollout_id")
    original = selectors.rollout_get(team=request.team, rollout_id=r.rerun_of_id)
    if not (r.is_finished and original.is_finished):
        return {"original": original.pk, "rerun": r.pk, "identical": None, "first_divergence": None, "reason": "not finished yet"}
    c = selectors.compare_trajectories(original, r)
    return {"original": original.pk, "rerun": r.pk, **c}


@router.get("/runs/{run_id}/usage")
def get_run_usage(request, run_id: int):
    """A model agent's tokens over the run (prompt, completion, total), model calls, and the cost
    when the agent's config sets price_prompt_per_mtok and price_completion_per_mtok."""
    from .openai_agent import run_model_usage

    return run_model_usage(selectors.run_get(team=request.team, run_id=run_id))
