"""Input and output shapes of the review API."""
from datetime import datetime
from typing import Literal

from ninja import Field, Schema

from .services import MAX_RATIONALE_LENGTH


class LabelIn(Schema):
    decision: Literal["approved", "rejected", "overridden"]
    value: float | None = None
    rationale: str = Field("", max_length=MAX_RATIONALE_LENGTH)
    step_index: int | None = Field(None, ge=0, description="label one step instead of the whole rollout")


class LabelOut(Schema):
    id: int
    rollout_id: int
    step_index: int | None
    source: str
    decision: str
    value: float | None
    reviewer: str | None
    rationale: str
    created_at: datetime
    verifier_version_id: int | None = Field(None, description="a verifier label's version when not the run's own (re-verification)")


class LabelHistoryOut(Schema):
    rollout_id: int
    reviews_required: int
    review_open_for_you: bool = Field(description="true while your independent review is owed; others' decisions are hidden until you decide")
    current: LabelOut | None = Field(description="the latest human decision, else the newest label of the run's own verifier")
    disagreement: bool = Field(False, description="a verifier label newer than the human decision judges otherwise")
    history: list[LabelOut]


class AnnotationIn(Schema):
    text: str = Field("", max_length=20_000)
    tags: list[str] = Field(default_factory=list, max_length=20)
    step_index: int | None = Field(None, ge=0)


class AnnotationOut(Schema):
    id: int
    rollout_id: int
    step_index: int | None
    author: str | None
    text: str
    tags: list[str]
    created_at: datetime


class QueueItemOut(Schema):
    id: int
    run_id: int
    environment: str
    version: str
    agent: str
    task_id: str
    seed: int
    status: str
    step_count: int
    proposed_reward: float | None
    verifier_reason: str
    reviews_required: int
    reviews_done: int
    disagreement: bool = False


class QueuePage(Schema):
    count: int
    offset: int
    limit: int
    items: list[QueueItemOut]


class NextOut(Schema):
    item: QueueItemOut | None
    remaining: int | None = Field(None, description="items left in your queue (with count=true)")


class ConfusionOut(Schema):
    verifier_pass_human_pass: int
    verifier_pass_human_fail: int
    verifier_fail_human_pass: int
    verifier_fail_human_fail: int


class VerifierHumanOut(Schema):
    compared: int
    confusion: ConfusionOut
    agreement_rate: float | None
    kappa: float | None


class HumanHumanOut(Schema):
    rollouts: int
    pairs: int
    agreement_rate: float | None


class VerifierAgreementOut(Schema):
    """One verifier version's labels on these rollouts (the run's own, or a re-verification's) against the
    current human decisions (blind review leaves out the decisions the viewer may not see yet)."""

    version: str
    own: bool = Field(description="the verifier of the version the rollouts ran on")
    labelled: int
    compared: int
    agreeing: int
    agreement_rate: float | None
    disagreements: int


class AgreementOut(Schema):
    rollouts: int
    rollouts_reviewed: int
    human_decisions: int
    approved: int
    rejected: int
    overridden: int
    override_rate: float | None
    verifier_human: VerifierHumanOut
    human_human: HumanHumanOut
    tags: dict[str, int]
    verifier_often_overridden: bool
    disagreements: int = Field(0, description="rollouts where a verifier label newer than the human decision judges otherwise")
    by_verifier: list[VerifierAgreementOut] = Field(default_factory=list)
