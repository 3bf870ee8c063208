"""Remote sessions: a training loop drives an episode over the API, recorded as a rollout of the
team's `remote` agent. A thin front end of the interactive episode service (runs/episodes)."""
from ..episodes import interactive
from ..models import AgentKind, Rollout

REMOTE_AGENT_NAME = "remote"


def session_start(*, team, actor, version, task_id: str, seed: int) -> dict:
    """Start (version, task, seed) on an episode host; returns {session_id, rollout_id, run_id,
    observation, tools, action_space}."""
    opened = interactive.episode_open(
        team=team, actor=actor, version=version, task_id=task_id, seed=seed, driver="session",
        agent_name=REMOTE_AGENT_NAME, agent_kind=AgentKind.REMOTE,
    )
    return {"session_id": opened["episode_id"], **opened}


def session_step(*, team, session_id: str, action) -> dict:
    return interactive.episode_step_remote(team=team, episode_id=session_id, action=action)


def session_steps(*, team, items: list[tuple[str, object]]) -> list[dict]:
    return interactive.episode_steps_remote(team=team, items=items)


def session_close(*, team, session_id: str) -> Rollout:
    return interactive.episode_close(team=team, episode_id=session_id)
