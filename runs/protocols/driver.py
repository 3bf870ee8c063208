"""Episodes as the protocols drive them: open (seed and task chosen as OpenEnv callers expect), step
(its action already checked against the version's action form, runs/protocols/wire.py), observe, close. Each is a recorded rollout of
the agent the client names (`agent=`), else the team's `openenv` (or `mcp`) agent, through the interactive episode service (runs/episodes)."""
import logging
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from runs.curriculum.sampler import STRATEGIES as CURRICULA
from runs.curriculum.services import task_for_episode
from runs.episodes import interactive
from runs.models import AgentKind
from studio.db_threads import in_pool

from . import spaces, wire
from .keys import Access

logger = logging.getLogger(__name__)

_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="protocols")


async def in_thread(function, /, *args, **kwargs):
    """A blocking call (database, a start on an episode host) off the event loop."""
    return await in_pool(_pool, function, *args, **kwargs)


class ResetInvalid(Exception):
    def __init__(self, errors: list[dict]):
        super().__init__(errors[0]["msg"] if errors else "invalid reset")
        self.errors = errors


@dataclass
class ProtocolEpisode:
    """One open episode of a protocol connection (or, over HTTP, named by its id)."""

    episode_id: str
    rollout_id: int
    task_id: str
    seed: int
    version_label: str
    observation: object = None
    tools: list = field(default_factory=list)
    reset_info: dict = field(default_factory=dict)
    step_count: int = 0
    done: bool = False
    closed: bool = False
    form: wire.ActionForm | None = None


RESET_KEYS = ("seed", "task_id", "episode_id", "curriculum", "agent")


def reset_arguments(*, version, data: dict) -> tuple[str, int]:
    """(task id, seed) of a reset: `task_id` picks the task, else the seed does (the same seed, the
    same task); no seed means a fresh random one (recorded on the rollout like any other)."""
    errors = []
    for name in data:
        if name not in RESET_KEYS:
            errors.append({"type": "extra_forbidden", "loc": ["data", name], "msg": f"Unknown reset parameter {name!r}; "
                           f"the studio takes {', '.join(RESET_KEYS)}", "input": data[name]})
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        errors.append({"type": "int_type", "loc": ["data", "seed"], "msg": "seed must be a whole number from 0 to 2^63-1", "input": seed})
    task_id = data.get("task_id")
    if task_id is not None and (not isinstance(task_id, (str, int)) or isinstance(task_id, bool)):
        errors.append({"type": "string_type", "loc": ["data", "task_id"], "msg": "task_id must be a string", "input": task_id})
    elif task_id is not None and str(task_id) not in spaces.task_ids_of(version):
        errors.append({"type": "value_error", "loc": ["data", "task_id"],
                       "msg": f"Task {str(task_id)!r} is not in {version.label}", "input": task_id})
    curriculum = data.get("curriculum")
    if curriculum is not None and curriculum not in CURRICULA:
        errors.append({"type": "literal_error", "loc": ["data", "curriculum"],
                       "msg": f"curriculum must be one of {', '.join(CURRICULA)}", "input": curriculum})
    agent = data.get("agent")
    if agent is not None and (not isinstance(agent, str) or not interactive.AGENT_NAME.match(agent)):
        errors.append({"type": "string_pattern_mismatch", "loc": ["data", "agent"], "input": agent,
                       "msg": "agent must be 1 to 120 letters, digits, '.', '_' or '-' (starting with a letter or digit)"})
    if errors:
        raise ResetInvalid(errors)
    if seed is None:
        seed = secrets.randbelow(2**31)
    return (str(task_id) if task_id is not None else spaces.task_for_seed(version, seed)), seed


def reset_open(access: Access, *, data: dict, task_id: str, seed: int, default_agent: str | None = None) -> ProtocolEpisode:
    """Open the episode of a reset (its `data` checked by reset_arguments, which chose `task_id` and `seed`).
    Its agent: the reset's `agent`, else the base URL's (`?agent=`), else `default_agent` (the credential's
    `openenv`). Its task: the one it names, else with a curriculum (the reset's, else the URL's) the
    sampler's pick for that agent from its statistics (docs/curriculum.md), else `task_id`. Blocking."""
    agent_name = interactive.checked_agent_name(team=access.team, name=data.get("agent") or access.url_agent,
                                                default=default_agent or access.agent_name)
    strategy = data.get("curriculum") or access.url_curriculum
    if strategy is not None and data.get("task_id") is None:
        task_id = task_for_episode(version=access.version, agent_name=agent_name, strategy=strategy, seed=seed)
    return episode_open(access, task_id=task_id, seed=seed, agent_name=agent_name)


def action_form_of(*, version, spaces_now: dict | None = None) -> wire.ActionForm:
    return spaces.action_form(spaces_now or spaces.version_spaces(version=version))


def episode_open(access: Access, *, task_id: str, seed: int, agent_name: str) -> ProtocolEpisode:
    opened = interactive.episode_open(
        team=access.team, actor=access.user, version=access.version, task_id=task_id, seed=seed, driver="session",
        agent_name=agent_name, agent_kind=AgentKind.REMOTE, credential=access.tags[0] if access.tags else "",
    )
    spaces.spaces_remember(version=access.version, opened=opened)
    spaces_now = spaces.version_spaces(version=access.version, task_id=task_id)
    return ProtocolEpisode(
        episode_id=opened["episode_id"], rollout_id=opened["rollout_id"], task_id=task_id, seed=seed,
        version_label=access.version.label, observation=opened.get("observation"), tools=opened.get("tools") or [],
        reset_info=opened.get("reset_info") or {},
        form=action_form_of(version=access.version, spaces_now=spaces_now),
    )


async def episode_step(access: Access, episode: ProtocolEpisode, action) -> dict:
    step = await interactive.episode_step_remote_async(team=access.team, episode_id=episode.episode_id, action=action)
    episode.step_count = step["index"] + 1 if isinstance(step.get("index"), int) else episode.step_count + 1
    episode.observation = step.get("observation")
    episode.done = bool(step.get("terminated") or step.get("truncated") or step.get("done"))
    return step


def episode_close(access: Access, episode: ProtocolEpisode):
    """Verify and end the rollout (once); a host that already let it go (idle, failed) is not an error."""
    if episode.closed:
        return None
    episode.closed = True
    try:
        return interactive.episode_close(team=access.team, episode_id=episode.episode_id)
    except interactive.EpisodeNotFound:
        return None


def episode_belongs(access: Access, episode_id: str) -> bool:
    """Whether an open episode is one of this credential's version (a key reaches no other version's)."""
    from runs.episodes import routing  # noqa: PLC0415
    from runs.models import Rollout  # noqa: PLC0415

    route = routing.route_of(str(episode_id))
    if route is None or route[1] != access.team.pk:
        return False
    return Rollout.objects.filter(pk=route[2], run__environment_version=access.version).exists()
