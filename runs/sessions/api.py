"""REST endpoints of remote sessions: start, step, close (team-scoped, `run` permission)."""
from ninja import Router, Status

from environments.selectors import version_by_label
from studio.api import require

from . import services
from .schemas import ActionIn, SessionClosedOut, SessionIn, SessionOut, SessionStepOut

router = Router(tags=["sessions"])


@router.post("/sessions", response={201: SessionOut})
def start_session(request, payload: SessionIn):
    """Start the environment version in a sandbox for one task and seed; returns the first observation
    and the tools. The session is recorded as a rollout of the team's `remote` agent."""
    require(request, "run")
    version = version_by_label(team=request.team, label=payload.version)
    session, first = services.session_start(
        team=request.team, actor=request.user, version=version, task_id=payload.task_id, seed=payload.seed
    )
    return Status(201, {"session_id": session.id, "rollout_id": session.rollout.pk, "run_id": session.rollout.run_id, **first})


@router.post("/sessions/{session_id}/step", response=SessionStepOut)
def step_session(request, session_id: str, payload: ActionIn):
    """One step: observation, reward, terminated, truncated, info (Gymnasium's five values)."""
    require(request, "run")
    session = services.session_get(team=request.team, session_id=session_id)
    return services.session_step(session=session, action=payload.action)


@router.post("/sessions/{session_id}/close", response=SessionClosedOut)
def close_session(request, session_id: str):
    """Verify the final state and finish the rollout; the sandbox ends."""
    require(request, "run")
    session = services.session_get(team=request.team, session_id=session_id)
    rollout = services.session_close(session=session)
    fields = ("status", "end_reason", "step_count", "total_reward", "verifier_reward", "verifier_reason", "error")
    return {"rollout_id": rollout.pk, **{name: getattr(rollout, name) for name in fields}}
