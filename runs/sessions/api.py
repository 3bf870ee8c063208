"""REST endpoints of remote sessions: start, step (one or a batch), close (team-scoped, `run` permission)."""
import hashlib
import threading
import time

from ninja import Router, Status
from ninja.security import HttpBearer

from environments.selectors import version_by_label
from studio.auth import TokenAuth, require
from studio.revocation import token_tag

from . import services
from ..episodes.interactive import open_episodes_of
from .schemas import (
    ActionIn, BatchStepIn, BatchStepOut, OpenEpisodesOut, SessionClosedOut, SessionIn, SessionOut, SessionStepOut,
)

router = Router(tags=["sessions"])

TOKEN_CACHE_S = 5.0


class CachedTokenAuth(HttpBearer):
    """The project's token auth, remembered for TOKEN_CACHE_S per token: a training loop's step then
    touches no database at all (a revoked token or changed role takes effect within those seconds)."""

    def __init__(self):
        super().__init__()
        self._checked: dict[str, tuple[float, object, object, object, object]] = {}
        self._lock = threading.Lock()

    def cached(self, request, token) -> object | None:
        """The token's API token when it was checked in the last TOKEN_CACHE_S (request filled in as
        `authenticate` does); None when it must be checked again (which reads the database)."""
        hit = self._checked.get(hashlib.sha256(token.encode("utf-8")).hexdigest())
        if hit is None or hit[0] < time.monotonic():
            return None
        _, api_token, request.team, request.membership, request.user = hit
        return api_token

    def authenticate(self, request, token):
        key = hashlib.sha256(token.encode("utf-8")).hexdigest()
        now = time.monotonic()
        hit = self._checked.get(key)
        if hit is None or hit[0] < now:
            api_token = TokenAuth().authenticate(request, token)
            if api_token is None:
                return None
            hit = (now + TOKEN_CACHE_S, api_token, request.team, request.membership, request.user)
            with self._lock:
                if len(self._checked) > 10_000:
                    self._checked.clear()
                self._checked[key] = hit
        _, api_token, request.team, request.membership, request.user = hit
        return api_token


step_auth = CachedTokenAuth()


@router.get("/sessions", response=OpenEpisodesOut)
def list_open_episodes(request):
    """The team's open episodes (remote sessions, protocol episodes, plays), newest first, with the
    memory each declares, their total and the team's budget (new episodes over it get a 429)."""
    require(request, "read")
    return open_episodes_of(team=request.team)


@router.post("/sessions", response={201: SessionOut})
def start_session(request, payload: SessionIn):
    """Start the environment version in a sandbox (held by an episode host) for one task and seed;
    returns the first observation and the tools. Recorded as a rollout of the team's agent named `agent`
    (a remote agent, `remote` when left out), whose task statistics it adds to."""
    require(request, "run")
    version = version_by_label(team=request.team, label=payload.version)
    opened = services.session_start(
        team=request.team, actor=request.user, version=version, task_id=payload.task_id, seed=payload.seed,
        credential=token_tag(request.auth.pk), run_name=payload.run_name, curriculum=payload.curriculum,
        agent_name=payload.agent,
    )
    return Status(201, opened)


@router.post("/sessions/step", response=BatchStepOut, auth=step_auth)
def step_sessions(request, payload: BatchStepIn):
    """Many sessions stepped in one request (vectorised training loops). Results come in the order of
    `steps`; each is a step (`ok: true`) or the error of that session alone (`ok: false`)."""
    require(request, "run")
    items = [(item.session_id, item.action) for item in payload.steps]
    return {"results": services.session_steps(team=request.team, items=items)}


@router.post("/sessions/{session_id}/step", response=SessionStepOut, auth=step_auth)
def step_session(request, session_id: str, payload: ActionIn):
    """One step: observation, reward, terminated, truncated, info (Gymnasium's five values)."""
    require(request, "run")
    return services.session_step(team=request.team, session_id=session_id, action=payload.action)


@router.post("/sessions/{session_id}/close", response=SessionClosedOut)
def close_session(request, session_id: str):
    """Verify the final state and finish the rollout; the sandbox ends."""
    require(request, "run")
    rollout = services.session_close(team=request.team, session_id=session_id)
    fields = ("status", "end_reason", "step_count", "total_reward", "verifier_reward", "verifier_reason", "error")
    return {"rollout_id": rollout.pk, **{name: getattr(rollout, name) for name in fields}}
