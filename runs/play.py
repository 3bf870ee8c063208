"""Play mode: an author acts as the agent of a browser environment from the studio page.

A play is a rollout of the team's `human` agent, held by an episode host like a remote session
(runs/episodes): every action is a step written and published as a worker's are, finishing runs
the verifier, and an idle play is closed (timed_out).
"""
import dataclasses

from environments.selectors import without_version_content
from studio.errors import DomainError

from .episodes import interactive
from .models import AgentKind, Rollout

HUMAN_AGENT_NAME = "human"


class InvalidPlay(DomainError):
    pass


@dataclasses.dataclass
class Play:
    """Where a play stands, as its page shows it."""

    id: str
    rollout: Rollout
    observation: dict | None
    artifact_url: str | None
    done: bool
    end_reason: str


def play_start(*, team, actor, version, task_id: str, seed: int = 0) -> Play:
    """Start the browser sandbox for (version, task, seed) on an episode host; a running `human` rollout."""
    if version.environment.team_id == team.pk and version.manifest.get("kind") != "browser":
        raise InvalidPlay("Play mode is for browser environments.", field="version")
    opened = interactive.episode_open(
        team=team, actor=actor, version=version, task_id=task_id, seed=seed, driver="play",
        agent_name=HUMAN_AGENT_NAME, agent_kind=AgentKind.HUMAN,
    )
    return _play(opened["episode_id"], opened)


def play_get(*, team, play_id: str) -> Play:
    return _play(play_id, interactive.episode_observe(team=team, episode_id=play_id))


def play_act(*, team, play_id: str, action: dict) -> dict:
    """One action as one step, stored (screenshot included) before it returns; `done` says the episode is over."""
    return interactive.episode_step_remote(team=team, episode_id=play_id, action=action)


def play_finish(*, team, play_id: str) -> Rollout:
    """Verify the final state (the verifier's reward becomes the first label) and end the rollout."""
    return interactive.episode_close(team=team, episode_id=play_id)


def _play(play_id: str, state: dict) -> Play:
    rollouts = Rollout.objects.select_related("run__environment_version__environment")
    rollout = without_version_content(rollouts, "run__environment_version").get(pk=state["rollout_id"])
    return Play(id=play_id, rollout=rollout, observation=state.get("observation"), artifact_url=state.get("artifact_url"),
                done=bool(state.get("done")), end_reason=state.get("end_reason") or "")
