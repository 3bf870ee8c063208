from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema


class SessionIn(Schema):
    version: str = Field(..., description="slug@N", pattern=r"^[a-z0-9][a-z0-9-]*@[0-9]+$")
    task_id: str | None = Field(None, min_length=1, max_length=200, description="the task; or leave it out and name a curriculum")
    curriculum: Literal["uniform", "learnable", "ladder"] | None = Field(
        None, description="no task_id: the curriculum's sampler picks the task from the agent's statistics (docs/curriculum.md)")
    seed: int = Field(0, ge=0, lt=2**63)
    agent: str | None = Field(None, description="the agent this loop's episodes (and task statistics) count under; "
                              "`remote` when left out")
    run_name: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[^/]+$",
                                 description="Group this episode into the session run of this name (a new run for a new name)")


class SessionOut(Schema):
    session_id: str
    task_id: str
    rollout_id: int
    run_id: int
    observation: Any = None
    reset_info: dict = {}
    tools: list[dict] = []
    action_space: Any = None
    observation_space: Any = None


class ActionIn(Schema):
    action: Any = None


class SessionStepOut(Schema):
    index: int
    observation: Any = None
    reward: float
    terminated: bool
    truncated: bool
    info: dict


class BatchStepItem(Schema):
    session_id: str = Field(..., min_length=1, max_length=100)
    action: Any = None


class BatchStepIn(Schema):
    steps: list[BatchStepItem] = Field(..., min_length=1, max_length=1024)


class BatchStepResult(Schema):
    ok: bool
    index: int | None = None
    observation: Any = None
    reward: float | None = None
    terminated: bool | None = None
    truncated: bool | None = None
    info: dict | None = None
    episode_id: str | None = None
    status: int | None = None
    error: str | None = None


class BatchStepOut(Schema):
    results: list[BatchStepResult]


class SessionClosedOut(Schema):
    rollout_id: int
    status: str
    end_reason: str
    step_count: int
    total_reward: float
    verifier_reward: float | None
    verifier_reason: str
    error: str


class OpenEpisodeOut(Schema):
    rollout_id: int
    run_id: int
    version: str
    task_id: str
    seed: int
    kind: str = Field(..., description="remote (a session or protocol client) or human (a play)")
    agent: str
    opened_by: str
    memory_mb: int = Field(..., description="the memory its version declares (limits.memory_mb)")
    step_count: int
    started_at: datetime | None = None


class OpenEpisodesOut(Schema):
    episodes: list[OpenEpisodeOut]
    memory_mb: int = Field(..., description="what the team's open episodes declare together")
    budget_mb: int = Field(..., description="what they may declare together (EPISODES_TEAM_MEMORY_MB)")
