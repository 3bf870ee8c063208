"""Interactive episodes as web processes see them: open, step (one or many), observe, close.

The web process only records the rollout and forwards to an episode host through Redis, so it
holds no state: any web process serves any episode. Human play and remote sessions (and protocol
endpoints) are thin front ends of these functions.
"""
import re
import secrets

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from environments.dependencies.services import ensure_version_runnable
from studio.errors import DomainError
from studio.storage_quota import astorage_quota_check_recent, storage_quota_check, storage_quota_check_recent
from studio.models import Team

from .. import events
from .. import services as run_services
from ..models import INFRA_ERROR, Agent, AgentKind, Rollout, RolloutStatus, Run, RunPurpose, RunStatus
from ..quality.gate import ensure_version_servable
from . import memory, plane, routing
from .host import INTERACTIVE_AGENT_KINDS, episode_orphan_end, idle_timeout_s
from .service import rollout_end
from .setup import task_of

MAX_BATCH = 1024
# What a team over its storage quota is told of a step refused (close the episode: closing is allowed).
STEP_STORED = "Storing another step of an open episode (close it; closing is allowed)"


class InvalidEpisode(DomainError):
    pass


class EpisodeNotFound(DomainError):
    status = 404


class EpisodeEnded(DomainError):
    """Stepping an episode that is over (or that failed): close it, or open a new one."""

    status = 409


class TooManyEpisodes(DomainError):
    status = 429
    retry_after_s: float | None = None


class EpisodeHostUnavailable(DomainError):
    status = 503


class RouterUnavailable(DomainError):
    """Redis, which carries requests to episode hosts, failed: nothing is known to have happened to
    the episode (its host may be fine), so it is not ended; the client may try again."""

    status = 503


def _domain_error(exc: routing.HostError) -> DomainError:
    cls = {404: EpisodeNotFound, 409: EpisodeEnded, 429: TooManyEpisodes, 503: EpisodeHostUnavailable}.get(exc.status)
    if cls is None:
        error = InvalidEpisode(str(exc), field=exc.field)
        error.status = exc.status
        return error
    return cls(str(exc), field=exc.field)


def max_open_per_team() -> int:
    return int(settings.EPISODES_MAX_OPEN_PER_TEAM)


def start_timeout_s(limits: dict) -> float:
    return float(limits.get("step_timeout_s") or 10) + float(limits.get("load_timeout_s") or 30) + 30


# A session run lists at most this many of its episodes' seeds (a training loop draws a fresh one per reset).
SESSION_RUN_SEEDS_LISTED = 100
RUN_NAME_MAX = 200
AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,119}$")


def session_run_idle_s() -> float:
    return float(settings.SESSION_RUN_IDLE_S)


def session_run_for(*, team, actor, version, agent, credential: str, run_name: str, task_id: str, seed: int, now) -> Run:
    """The session run a remote episode joins: the newest session run of this credential, version and agent
    (and run name, when the client gives one), unless it was cancelled or, unnamed, has been idle (no episode
    open) for more than SESSION_RUN_IDLE_S; else a new one. Joining makes it running again until its last
    episode ends (runs.episodes.status.run_finish_if_done sets finished_at then). Called under the team's
    row lock (episode_open), so two episodes opening at once join the same run."""
    key = f"{credential}/{run_name}" if run_name else credential
    run = (Run.objects.select_for_update().filter(team=team, purpose=RunPurpose.SESSION, environment_version=version,
                                                  agent=agent, session_key=key).order_by("-created_at", "-id").first())
    if run is not None and run.status != RunStatus.CANCELLED and (
        run_name or run.status in (RunStatus.QUEUED, RunStatus.RUNNING)
        or (run.finished_at is not None and (now - run.finished_at).total_seconds() <= session_run_idle_s())
    ):
        if task_id not in run.task_ids:
            run.task_ids.append(task_id)
        if seed not in run.seeds and len(run.seeds) < SESSION_RUN_SEEDS_LISTED:
            run.seeds.append(seed)
        run.status, run.finished_at = RunStatus.RUNNING, None
        run.save(update_fields=["task_ids", "seeds", "status", "finished_at"])
        return run
    return Run.objects.create(
        team=team, environment_version=version, agent=agent, task_ids=[task_id], seeds=[seed], limits={},
        status=RunStatus.RUNNING, created_by=actor, purpose=RunPurpose.SESSION, session_key=key,
    )


def checked_run_name(run_name) -> str:
    """The run name a client gives its episodes ("" for none); InvalidEpisode names what is wrong."""
    if run_name is None:
        return ""
    if not isinstance(run_name, str) or not run_name.strip() or len(run_name) > RUN_NAME_MAX or "/" in run_name:
        raise InvalidEpisode(f"run_name must be a non-empty text of at most {RUN_NAME_MAX} characters without '/'.",
                             field="run_name")
    return run_name.strip()


def checked_agent_name(*, team, name, default: str) -> str:
    """The agent a remote client names for its episodes (`agent=`; `default` when it names none): their
    rollouts, and so the task statistics (runs/curriculum), count under that name. InvalidEpisode names
    what is wrong: not 1-120 letters, digits, '.', '_' or '-', or the name of a team agent that is not remote
    (a random or scripted agent's statistics are its runs', never a remote client's)."""
    if name is None:
        return default
    if not isinstance(name, str) or not AGENT_NAME.match(name):
        raise InvalidEpisode(f"agent must be 1 to 120 letters, digits, '.', '_' or '-' (starting with a letter or digit), "
                             f"not {name!r}.", field="agent")
    kind = Agent.objects.filter(team=team, name=name).values_list("kind", flat=True).first()
    if kind is not None and kind != AgentKind.REMOTE:
        raise InvalidEpisode(f"agent {name!r} is the team's {kind} agent: name a remote agent (a new name makes one).",
                             field="agent")
    return name


def episode_open(*, team, actor, version, task_id: str, seed: int, driver: str, agent_name: str, agent_kind: str,
                 purpose: str = RunPurpose.SESSION, credential: str = "", run_name: str | None = None) -> dict:
    """Record a running rollout of the team's `agent_name` agent and have an episode host start it.
    A play is a run of its own; a remote episode (purpose session) joins the session run of its
    `credential` (session_run_for), or of `run_name` when the client names one.
    Returns {episode_id, rollout_id, run_id, observation, tools, action_space, artifact_url, ...}."""
    run_name = checked_run_name(run_name)
    if version.environment.team_id != team.pk:
        raise InvalidEpisode("That environment version belongs to another team.", field="version")
    task = task_of(version, task_id)
    if task is None:
        raise InvalidEpisode(f"Task {task_id!r} is not in {version.label}.", field="task_id")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InvalidEpisode(f"The seed must be a whole number from 0 to 2^63-1, not {seed!r}.", field="seed")
    ensure_version_runnable(version)  # its dependency environment built and its entrypoint checked
    if purpose == RunPurpose.SESSION:
        ensure_version_servable(version=version)  # the team's training gate (a play is a person looking)
    storage_quota_check(team_id=team.pk, what="New episode")
    agent = run_services.agent_get_or_create(team=team, actor=actor, name=agent_name, kind=agent_kind)
    episode_id = secrets.token_urlsafe(16)
    now = timezone.now()
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=team.pk).first()  # one open-count check at a time per team
        open_now = Rollout.objects.filter(
            team=team, status=RolloutStatus.RUNNING, run__agent__kind__in=INTERACTIVE_AGENT_KINDS
        ).count()
        if open_now >= max_open_per_team():
            raise TooManyEpisodes(
                f"Your team has {open_now} open episodes, the most it may hold at once"
                f" (EPISODES_MAX_OPEN_PER_TEAM={max_open_per_team()}); close some first."
            )
        idle_s = idle_timeout_s(driver)
        refusal = memory.over_team_budget(
            team_id=team.pk, agent_kinds=INTERACTIVE_AGENT_KINDS, asks_mb=memory.declared_memory_mb(version), retry_s=idle_s
        )
        if refusal:
            error = TooManyEpisodes(refusal)
            error.retry_after_s = idle_s
            raise error
        if purpose == RunPurpose.SESSION:
            run = session_run_for(team=team, actor=actor, version=version, agent=agent, credential=credential,
                                  run_name=run_name, task_id=str(task["id"]), seed=seed, now=now)
        else:
            run = Run.objects.create(
                team=team, environment_version=version, agent=agent, task_ids=[str(task["id"])], seeds=[seed],
                limits={}, status=RunStatus.RUNNING, created_by=actor, purpose=purpose,
            )
        transaction.on_commit(lambda: events.publish_run(run))
        rollout = Rollout.objects.create(
            team=team, run=run, task_id=str(task["id"]), seed=seed, status=RolloutStatus.RUNNING, attempts=1,
            worker=f"episode-host:pending-{episode_id[:8]}", started_at=now, heartbeat_at=now,
        )
        transaction.on_commit(lambda: events.publish_rollout(rollout))
    message = {"op": "start", "episode": episode_id, "team": team.pk, "rollout": rollout.pk, "driver": driver}
    try:
        result = plane.call(message=message, host_id=None, timeout_s=start_timeout_s(version.manifest.get("limits") or {}))
    except routing.HostUnavailable as exc:
        rollout_end(rollout=rollout, status=RolloutStatus.ERRORED, error=str(exc), end_reason=INFRA_ERROR)
        raise EpisodeHostUnavailable(str(exc)) from None
    except routing.RedisUnavailable as exc:
        # A host may have started it and be unable to answer: ending the rollout makes that host let
        # go of it at its next write (it is no longer ours), so nothing stays open unseen.
        rollout_end(rollout=rollout, status=RolloutStatus.ERRORED, error=str(exc), end_reason=INFRA_ERROR)
        raise RouterUnavailable(str(exc)) from None
    except routing.HostError as exc:
        if exc.status == 429:  # the host had no room: the episode never started
            rollout_end(rollout=rollout, status=RolloutStatus.CANCELLED, error=str(exc), end_reason="refused")
        raise _domain_error(exc) from None
    return {"episode_id": episode_id, "rollout_id": rollout.pk, "run_id": rollout.run_id, **result}


def _route(*, team, episode_id: str) -> tuple[str, int]:
    try:
        route = routing.route_of(str(episode_id))
    except routing.RedisUnavailable as exc:
        raise RouterUnavailable(str(exc)) from None
    if route is None or route[1] != team.pk:
        raise EpisodeNotFound("No open episode with this id (closed, timed out, or never opened).")
    return route[0], route[2]


def episode_rollout_id(*, team, episode_id: str) -> int:
    """The rollout of an open episode of the team (EpisodeNotFound otherwise)."""
    return _route(team=team, episode_id=episode_id)[1]


def _call(*, team, episode_id: str, message: dict, timeout_s: float) -> dict:
    host_id, rollout_id = _route(team=team, episode_id=episode_id)
    try:
        return plane.call(message={**message, "episode": episode_id, "team": team.pk}, host_id=host_id, timeout_s=timeout_s)
    except routing.HostUnavailable as exc:
        raise _host_lost(episode_id=episode_id, rollout_id=rollout_id, exc=exc) from None
    except routing.RedisUnavailable as exc:
        raise RouterUnavailable(str(exc)) from None
    except routing.HostError as exc:
        if exc.status == 404:
            routing.route_forget(episode_id)
        raise _domain_error(exc) from None


def _host_lost(*, episode_id: str, rollout_id: int, exc: routing.HostUnavailable) -> EpisodeHostUnavailable:
    """The host holding the episode stopped: end its rollout with the reason now, not at the next sweep."""
    routing.route_forget(episode_id)
    rollout = Rollout.objects.filter(pk=rollout_id, status=RolloutStatus.RUNNING).first()
    if rollout is not None:
        episode_orphan_end(rollout=rollout, error=str(exc))
    return EpisodeHostUnavailable(str(exc))


async def episode_step_remote_async(*, team, episode_id: str, action) -> dict:
    """`episode_step_remote` on an event loop: the same route check, request and errors, awaited."""
    from asgiref.sync import sync_to_async

    try:
        route = await routing.aroute_of(str(episode_id))
    except routing.RedisUnavailable as exc:
        raise RouterUnavailable(str(exc)) from None
    if route is None or route[1] != team.pk:
        raise EpisodeNotFound("No open episode with this id (closed, timed out, or never opened).")
    await astorage_quota_check_recent(team_id=team.pk, what=STEP_STORED)
    message = {"op": "step", "action": action, "episode": episode_id, "team": team.pk}
    try:
        return await plane.acall(message=message, host_id=route[0], timeout_s=_step_timeout_s())
    except routing.RedisUnavailable as exc:
        raise RouterUnavailable(str(exc)) from None
    except routing.HostUnavailable as exc:
        raise await sync_to_async(_host_lost)(episode_id=episode_id, rollout_id=route[2], exc=exc) from None
    except routing.HostError as exc:
        if exc.status == 404:
            routing.route_forget(episode_id)
        raise _domain_error(exc) from None


def episode_step_remote(*, team, episode_id: str, action) -> dict:
    """One step of an open episode, stored and published like a worker's."""
    storage_quota_check_recent(team_id=team.pk, what=STEP_STORED)
    return _call(team=team, episode_id=episode_id, message={"op": "step", "action": action}, timeout_s=_step_timeout_s())


def episode_steps_remote(*, team, items: list[tuple[str, object]]) -> list[dict]:
    """Many episodes stepped in one request (a vectorised training loop): items are (episode id,
    action); results come back in the same order, each {"ok": true, step...} or {"ok": false, error}."""
    if len(items) > MAX_BATCH:
        raise InvalidEpisode(f"A batch holds at most {MAX_BATCH} steps, not {len(items)}.", field="steps")
    storage_quota_check_recent(team_id=team.pk, what=STEP_STORED)
    by_host: dict[str, list[int]] = {}
    results: list[dict | None] = [None] * len(items)
    for position, (episode_id, _) in enumerate(items):
        try:
            route = routing.route_of(str(episode_id))
        except routing.RedisUnavailable as exc:
            raise RouterUnavailable(str(exc)) from None
        if route is None or route[1] != team.pk:
            results[position] = {"ok": False, "episode_id": episode_id, "status": 404,
                                 "error": "No open episode with this id (closed, timed out, or never opened)."}
            continue
        by_host.setdefault(route[0], []).append(position)
    for host_id, positions in by_host.items():
        message = {"op": "steps", "items": [{"episode": items[p][0], "team": team.pk, "action": items[p][1]} for p in positions]}
        try:
            answered = plane.call(message=message, host_id=host_id, timeout_s=_step_timeout_s())["results"]
        except (routing.HostUnavailable, routing.RedisUnavailable) as exc:
            answered = [{"ok": False, "episode_id": items[p][0], "status": 503, "error": str(exc)} for p in positions]
        for position, result in zip(positions, answered):
            results[position] = result
    return results


def episode_observe(*, team, episode_id: str) -> dict:
    """Where an open episode stands: its rollout, last observation, screenshot URL, whether it is over."""
    return _call(team=team, episode_id=episode_id, message={"op": "observe"}, timeout_s=10)


def episode_close(*, team, episode_id: str) -> Rollout:
    """Verify the final state, store the verifier's first label, end the rollout and its sandbox."""
    result = _call(team=team, episode_id=episode_id, message={"op": "close"}, timeout_s=_close_timeout_s())
    routing.route_forget(episode_id)
    return Rollout.objects.get(pk=result["rollout_id"])


def _step_timeout_s() -> float:
    return float(settings.EPISODE_STEP_WAIT_S)


def _close_timeout_s() -> float:
    return float(settings.EPISODE_STEP_WAIT_S) + 60


def open_episodes_of(*, team) -> dict:
    """The team's open interactive episodes with their declared memory and the team's budget."""
    return memory.open_episodes_summary(team_id=team.pk, agent_kinds=INTERACTIVE_AGENT_KINDS)
