"""Remote sessions: a training loop drives an episode over the API, recorded as a rollout of the
remote agent it names (`agent=`), else the team's `remote` agent. A thin front end of the interactive episode service (runs/episodes)."""
from ..action_names import named_space
from ..curriculum.services import task_for_episode
from ..episodes import interactive
from ..models import AgentKind, Rollout
from ..protocols.spaces import spaces_remember

REMOTE_AGENT_NAME = "remote"


def session_start(*, team, actor, version, task_id: str | None, seed: int, credential: str, run_name: str | None = None,
                  curriculum: str | None = None, agent_name: str | None = None) -> dict:
    """Start (version, task, seed) on an episode host; returns {session_id, rollout_id, run_id,
    observation, reset_info, tools, action_space, observation_space}. What the episode reported of
    its spaces becomes the version's published spaces (GET .../spaces), as protocol episodes do.
    The episode joins the session run of `credential` (or of `run_name`), runs.episodes.interactive.session_run_for.
    Its rollout is the named agent's (REMOTE_AGENT_NAME when none), and so are its curriculum's statistics."""
    agent_name = interactive.checked_agent_name(team=team, name=agent_name, default=REMOTE_AGENT_NAME)
    if task_id is None:
        if curriculum is None:
            raise interactive.InvalidEpisode("Give a task_id, or a curriculum to pick one.", field="task_id")
        task_id = task_for_episode(version=version, agent_name=agent_name, strategy=curriculum, seed=seed)
    opened = interactive.episode_open(
        team=team, actor=actor, version=version, task_id=task_id, seed=seed, driver="session",
        agent_name=agent_name, agent_kind=AgentKind.REMOTE, credential=credential, run_name=run_name,
    )
    spaces_remember(version=version, opened=opened)
    # The actions' names as play and replay call them ([actions] names over the space's own) in the space's
    # `names`, the one key a client's space reading leaves free (studio_client reads type, n and start).
    action_space = named_space(manifest=version.manifest, action_space=opened.get("action_space"))
    return {"session_id": opened["episode_id"], "task_id": task_id, **opened, "action_space": action_space}


def session_step(*, team, session_id: str, action) -> dict:
    return interactive.episode_step_remote(team=team, episode_id=session_id, action=action)


def session_steps(*, team, items: list[tuple[str, object]]) -> list[dict]:
    return interactive.episode_steps_remote(team=team, items=items)


def session_close(*, team, session_id: str) -> Rollout:
    return interactive.episode_close(team=team, episode_id=session_id)
