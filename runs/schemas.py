from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema

from .artifacts import artifact_url, arrays_public
from .models import Step


class AgentIn(Schema):
    name: str = Field(..., min_length=1, max_length=120)
    kind: Literal["scripted", "random", "openai"]
    code: str = ""
    config: dict = Field({}, description="openai: base_url, model, temperature, max_tokens, system_prompt, max_turns, ...")
    api_key: str = Field("", description="openai: the endpoint's API key; stored as a secret, never returned")


class AgentOut(Schema):
    id: int
    name: str
    kind: str
    code_hash: str
    created_at: datetime


class AgentDetailOut(AgentOut):
    code: str
    config: dict
    api_key_set: bool = False

    @staticmethod
    def resolve_api_key_set(agent) -> bool:
        # Whether a key is stored, never the key itself.
        from .models import AgentSecret

        return AgentSecret.objects.filter(agent_id=agent.pk).exclude(api_key="").exists()


class RunIn(Schema):
    version: str = Field(..., description="slug@N", pattern=r"^[a-z0-9][a-z0-9-]*@[0-9]+$")
    agent: str | int = Field("random", description="'random', 'version' (the scripted agent the version ships: its"
                                                    " [quality] oracle, else agent.py), an agent's name, or an agent id")
    task_ids: Literal["all"] | list[str] | str = Field("all", description=(
        "'all', a list of task ids, or 'curriculum[:uniform|learnable|ladder]': `count` rollouts whose tasks are"
        " picked as each is dispatched, from the agent's task statistics (docs/curriculum.md)"))
    count: int | None = Field(None, ge=1, description="rollouts of a curriculum run")
    difficulties: list[int] | None = None
    seeds: str | list[int] = Field("0", description="'0-9', '1,2,7' or a list of ints")
    repeats: int = Field(1, ge=1, le=100)
    limits: dict[str, float] = {}
    reviews_required: int = Field(1, ge=1, le=10)


class RunOut(Schema):
    id: int
    environment: str
    version: str
    content_hash: str
    agent: str
    agent_id: int
    status: str
    purpose: str = Field(..., description="evaluation (a person or the API started it), audit, reverify, session (remote episodes), play")
    task_ids: list[str]
    seeds: list[int]
    repeats: int
    limits: dict
    reviews_required: int
    created_at: datetime
    finished_at: datetime | None
    summary: dict = Field(..., description=(
        "runs.figures.run_figures, the same figures as the run page and its live updates: total, done (terminal"
        " but not cancelled), cancelled, pending (queued or running; 0 once the run is over), counts per status,"
        " succeeded, success_rate (succeeded / done), return and verifier as {mean, count, missing} (mean over the"
        " done rollouts that have that reward, missing = done without it), mean_steps (over done), run_id, status,"
        " the same figures by_difficulty and by_task, and signal: {groups, zero_variance_groups, share_with_signal}"
        " (a group is the done rollouts of one task; it has signal when some succeeded and some failed)."
    ))


class RolloutOut(Schema):
    id: int
    run_id: int
    task_id: str
    seed: int
    repeat: int
    status: str
    total_reward: float
    verifier_reward: float | None
    verifier_reason: str
    verifier_error: str
    step_count: int
    error: str
    end_reason: str
    started_at: datetime | None
    finished_at: datetime | None
    rerun_of_id: int | None


class RolloutDetailOut(RolloutOut):
    reproduction: dict
    initial_observation: Any = None
    reset_info: dict = {}
    labels: list[dict]


class StepOut(Schema):
    index: int
    artifact_url: str | None = None
    action: Any = None
    observation: Any = None
    reward: float
    terminated: bool
    truncated: bool
    info: dict
    elapsed_ms: float

    @staticmethod
    def resolve_artifact_url(step):
        artifact = step.artifact if isinstance(step, Step) else step.get("artifact")
        return artifact_url(str(artifact)) if artifact else None

    @staticmethod
    def resolve_observation(step):
        if isinstance(step, Step):
            return arrays_public(step.observation, rollout_id=step.rollout_id)
        return step.get("observation")


class StepPage(Schema):
    count: int
    offset: int
    limit: int
    steps: list[StepOut]


class ComparisonOut(Schema):
    original: int
    rerun: int
    identical: bool | None
    first_divergence: int | None
    reason: str
