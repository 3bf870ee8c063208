"""Play mode: an author acts as the agent of an environment from the studio page (a browser page
through its actions, any other environment through JSON actions, its image observations shown).

A play is a rollout of the team's `human` agent, held by an episode host like a remote session
(runs/episodes): every action is a step written and published as a worker's are, finishing runs
the verifier, and an idle play is closed (timed_out).
"""
import dataclasses

from environments.selectors import without_version_content

from .artifacts import arrays_public
from .episodes import interactive
from .models import AgentKind, Rollout, RunPurpose, Step

HUMAN_AGENT_NAME = "human"


@dataclasses.dataclass
class Play:
    """Where a play stands, as its page shows it."""

    id: str
    rollout: Rollout
    observation: dict | None  # as pages show it: stored arrays with their URLs (image-like ones are PNGs)
    artifact_url: str | None
    done: bool
    end_reason: str
    kind: str = "browser"
    action_space: dict | None = None


def play_start(*, team, actor, version, task_id: str, seed: int = 0) -> Play:
    """Start the sandbox for (version, task, seed) on an episode host; a running `human` rollout."""
    opened = interactive.episode_open(
        team=team, actor=actor, version=version, task_id=task_id, seed=seed, driver="play",
        agent_name=HUMAN_AGENT_NAME, agent_kind=AgentKind.HUMAN, purpose=RunPurpose.PLAY,
    )
    return _play(opened["episode_id"], opened)


def play_get(*, team, play_id: str) -> Play:
    return _play(play_id, interactive.episode_observe(team=team, episode_id=play_id))


def play_act(*, team, play_id: str, action) -> dict:
    """One action as one step, stored (screenshot and arrays included) before it returns, its arrays
    with their URLs; `done` says the episode is over."""
    step = interactive.episode_step_remote(team=team, episode_id=play_id, action=action)
    rollout_id = interactive.episode_rollout_id(team=team, episode_id=play_id)
    return {**step, "observation": arrays_public(step["observation"], rollout_id=rollout_id)}


def play_finish(*, team, play_id: str) -> Rollout:
    """Verify the final state (the verifier's reward becomes the first label) and end the rollout."""
    return interactive.episode_close(team=team, episode_id=play_id)


def _play(play_id: str, state: dict) -> Play:
    rollouts = Rollout.objects.select_related("run__environment_version__environment")
    rollout = without_version_content(rollouts, "run__environment_version").get(pk=state["rollout_id"])
    kind = rollout.run.environment_version.manifest.get("kind") or "python"
    observation = state.get("observation")
    if kind != "browser":
        observation = _stored_observation(rollout, fallback=observation)
    return Play(id=play_id, rollout=rollout, observation=observation, artifact_url=state.get("artifact_url"),
                done=bool(state.get("done")), end_reason=state.get("end_reason") or "", kind=kind,
                action_space=state.get("action_space"))


def _stored_observation(rollout: Rollout, *, fallback):
    """The play's current observation as stored (a play's steps are written at once): its arrays are
    files the page can show; `fallback` (the host's, arrays inline) while nothing is stored yet."""
    last = Step.objects.filter(rollout=rollout).order_by("-index").values_list("observation", flat=True).first()
    stored = last if last is not None else rollout.initial_observation
    return fallback if stored is None else arrays_public(stored, rollout_id=rollout.pk)
