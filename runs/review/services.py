"""Review writes: human decisions on reward labels (always a new row) and step/rollout annotations."""
from django.db import transaction

from studio.errors import Conflict, DomainError
from studio.models import Membership

from ..labels import own_layer
from ..models import Annotation, LabelDecision, LabelSource, RewardLabel, Rollout, Step

HUMAN_DECISIONS = (LabelDecision.APPROVED, LabelDecision.REJECTED, LabelDecision.OVERRIDDEN)
MAX_TAGS = 20
MAX_TAG_LENGTH = 40
MAX_TEXT_LENGTH = 20_000
MAX_RATIONALE_LENGTH = 10_000


class InvalidDecision(DomainError):
    pass


class InvalidAnnotation(DomainError):
    pass


class ReviewForbidden(DomainError):
    status = 403


class AlreadyDecided(Conflict):
    pass


def _require_role(*, team, actor, permission: str, or_permission: str | None = None) -> None:
    membership = Membership.objects.filter(team=team, user=actor).first()
    allowed = membership is not None and (membership.can(permission) or (or_permission and membership.can(or_permission)))
    if not allowed:
        role = membership.role if membership else "not a member"
        raise ReviewForbidden(f"Your role ({role}) cannot do this.")


def label_decide(*, rollout: Rollout, actor, decision: str, value: float | None = None, rationale: str = "",
                 step: Step | None = None) -> RewardLabel:
    """Append a human decision on the rollout's (or one step's) reward label; nothing earlier changes.

    approved keeps the proposed value; rejected says the proposal is wrong (value optional);
    overridden needs a new value and a rationale. While the rollout still waits for reviews
    (fewer than the run's `reviews_required` distinct reviewers), a reviewer decides once: the
    queue counts reviewers, not clicks. Once the reviews are complete a reviewer may decide again
    (a correction), appended like any other. Two reviewers deciding at the same moment both count.
    """
    _require_role(team=rollout.team, actor=actor, permission="review")
    if decision not in HUMAN_DECISIONS:
        raise InvalidDecision(f"decision must be one of {', '.join(HUMAN_DECISIONS)}.", field="decision")
    rationale = (rationale or "").strip()
    if decision == LabelDecision.OVERRIDDEN:
        if value is None:
            raise InvalidDecision("An override needs the new value.", field="value")
        if not rationale:
            raise InvalidDecision("An override needs a rationale: why the proposed value is wrong.", field="rationale")
    if len(rationale) > MAX_RATIONALE_LENGTH:
        raise InvalidDecision(f"A rationale is at most {MAX_RATIONALE_LENGTH:,} characters.", field="rationale")
    if value is not None and (value != value or value in (float("inf"), float("-inf"))):
        raise InvalidDecision("value must be a finite number.", field="value")
    if step is not None and step.rollout_id != rollout.pk:
        raise InvalidDecision("That step belongs to another rollout.", field="step")

    with transaction.atomic():
        # One decision at a time per rollout: the "already decided" check and the insert see the same history.
        Rollout.objects.select_for_update().filter(pk=rollout.pk).values_list("pk").get()
        labels = RewardLabel.objects.filter(rollout=rollout, step=step)
        if decision == LabelDecision.APPROVED:
            # What the run's own verifier proposed: a re-verification's label by another version is shown
            # beside it (runs.labels) but is not what an approval keeps.
            proposal = (labels.filter(source=LabelSource.VERIFIER).filter(own_layer(run_version=rollout.run.environment_version_id))
                        .order_by("-created_at", "-id").first())
            value = proposal.value if proposal else value
            if value is None:
                # Approved labels are training data: a rollout that produced no reward has nothing to approve.
                raise InvalidDecision(
                    f"This rollout ({rollout.status}) has no reward to approve: reject it (for example as the"
                    " environment's fault), or override it with a value and a rationale.",
                    field="decision",
                )
        if step is None:
            deciders = set(labels.filter(source=LabelSource.HUMAN).values_list("reviewer_id", flat=True))
            required = max(1, rollout.run.reviews_required)
            if actor.pk in deciders and len(deciders) < required:
                raise AlreadyDecided(
                    f"You already decided this rollout; it waits for {required - len(deciders)} more reviewer(s).",
                    field="decision",
                )
        return RewardLabel.objects.create(
            team_id=rollout.team_id, rollout=rollout, step=step, source=LabelSource.HUMAN, value=value,
            decision=decision, reviewer=actor, rationale=rationale,
        )


def annotation_add(*, rollout: Rollout, actor, text: str, tags: list[str] | None = None,
                   step: Step | None = None) -> Annotation:
    """A note on a rollout or one of its steps; tags are normalized (lower case, dashes) and deduplicated.

    Reviewers and owners annotate while reviewing; authors may too (an author flags an env-bug).
    """
    _require_role(team=rollout.team, actor=actor, permission="review", or_permission="author")
    text = (text or "").strip()
    clean_tags: list[str] = []
    for tag in tags or []:
        tag = "-".join(str(tag).strip().lower().split())
        if not tag:
            continue
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidAnnotation(f"A tag is at most {MAX_TAG_LENGTH} characters.", field="tags")
        if tag not in clean_tags:
            clean_tags.append(tag)
    if len(clean_tags) > MAX_TAGS:
        raise InvalidAnnotation(f"At most {MAX_TAGS} tags.", field="tags")
    if not text and not clean_tags:
        raise InvalidAnnotation("An annotation needs text or at least one tag.", field="text")
    if len(text) > MAX_TEXT_LENGTH:
        raise InvalidAnnotation(f"An annotation is at most {MAX_TEXT_LENGTH} characters.", field="text")
    if step is not None and step.rollout_id != rollout.pk:
        raise InvalidAnnotation("That step belongs to another rollout.", field="step")
    return Annotation.objects.create(team_id=rollout.team_id, rollout=rollout, step=step, author=actor, text=text,
                                     tags=clean_tags)


BULK_MOST = 500


def labels_decide_bulk(*, team, rollouts, actor, decision: str, rationale: str = "") -> dict:
    """Approve or reject every rollout of a (filtered) selection of the team's, by the rules of
    `label_decide`, one at a time: what a rule refuses (no reward to approve, already decided) is
    listed with its reason and the rest goes on. At most BULK_MOST rollouts a call. An override needs
    a value and a rationale of its own, so overrides are one by one."""
    _require_role(team=team, actor=actor, permission="review")
    if decision not in (LabelDecision.APPROVED, LabelDecision.REJECTED):
        raise InvalidDecision("Bulk decisions approve or reject; override rollouts one by one.", field="decision")
    decided, refused = [], []
    for rollout in rollouts.filter(team=team).select_related("run", "team")[:BULK_MOST]:
        try:
            label_decide(rollout=rollout, actor=actor, decision=decision, rationale=rationale)
        except DomainError as exc:
            refused.append({"rollout_id": rollout.pk, "reason": exc.message})
        else:
            decided.append(rollout.pk)
    return {"decision": decision, "decided": decided, "refused": refused}
