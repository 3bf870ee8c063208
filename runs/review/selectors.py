"""Review reads: the per-team queue and its "next" item, label history as each viewer may see it,
annotations, and agreement figures (verifier vs human, human vs human) per version or run."""
from collections import Counter
from dataclasses import dataclass
from itertools import combinations

from django.db.models import Count, Exists, F, FloatField, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce, Greatest

from studio.models import ROLE_PERMISSIONS, Membership

from ..models import Annotation, LabelDecision, LabelSource, RewardLabel, Rollout

# A version's verifier is flagged when humans often change its verdicts.
FLAG_MIN_DECISIONS = 5
FLAG_OVERRIDE_RATE = 0.3
VERIFIER_OUTCOMES = ("pass", "fail")


@dataclass(frozen=True)
class QueueFilters:
    """What a reviewer narrows the queue to; every field optional. Rewards are the verifier's proposal."""

    environment: str | None = None  # environment slug
    version: int | None = None  # version number (with environment) or, without it, any environment's number
    run_id: int | None = None
    agent_id: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    verifier_outcome: str | None = None  # "pass" (reward > 0) or "fail"


def _rollout_labels():
    return RewardLabel.objects.filter(rollout=OuterRef("pk"), step__isnull=True)


def _human_decider_count():
    deciders = (
        _rollout_labels().filter(source=LabelSource.HUMAN).order_by().values("rollout")
        .annotate(n=Count("reviewer", distinct=True)).values("n")
    )
    return Coalesce(Subquery(deciders, output_field=IntegerField()), Value(0))


def _proposed_reward():
    proposal = _rollout_labels().filter(source=LabelSource.VERIFIER).order_by("-created_at", "-id").values("value")[:1]
    return Subquery(proposal, output_field=FloatField())


def rollouts_matching(*, team, filters: QueueFilters | None = None):
    """The team's rollouts narrowed by the filters (annotated with `proposed_reward`), in id order."""
    filters = filters or QueueFilters()
    rollouts = Rollout.objects.filter(team=team)
    if filters.run_id is not None:
        rollouts = rollouts.filter(run_id=filters.run_id)
    if filters.agent_id is not None:
        rollouts = rollouts.filter(run__agent_id=filters.agent_id)
    if filters.environment:
        rollouts = rollouts.filter(run__environment_version__environment__slug=filters.environment)
    if filters.version is not None:
        rollouts = rollouts.filter(run__environment_version__number=filters.version)
    rollouts = rollouts.annotate(proposed_reward=_proposed_reward())
    if filters.min_reward is not None:
        rollouts = rollouts.filter(proposed_reward__gte=filters.min_reward)
    if filters.max_reward is not None:
        rollouts = rollouts.filter(proposed_reward__lte=filters.max_reward)
    if filters.verifier_outcome == "pass":
        rollouts = rollouts.filter(proposed_reward__gt=0)
    elif filters.verifier_outcome == "fail":
        rollouts = rollouts.filter(proposed_reward__lte=0)
    return rollouts.order_by("id")


def review_queue(*, team, reviewer, filters: QueueFilters | None = None):
    """Rollouts of the team that still wait for `reviewer`'s decision, oldest first (by id).

    A rollout waits while it has a verifier proposal and fewer distinct human reviewers than its
    run's `reviews_required` (K); a reviewer who already decided it no longer sees it.
    """
    return (
        rollouts_matching(team=team, filters=filters)
        .annotate(human_deciders=_human_decider_count())
        .filter(
            Exists(_rollout_labels().filter(source=LabelSource.VERIFIER)),
            human_deciders__lt=Greatest(F("run__reviews_required"), Value(1)),
        )
        .exclude(Exists(_rollout_labels().filter(source=LabelSource.HUMAN, reviewer=reviewer)))
        .select_related("run__environment_version__environment", "run__agent")
        .order_by("id")
    )


def next_in_queue(*, team, reviewer, after_rollout_id: int | None = None, filters: QueueFilters | None = None):
    """The item after `after_rollout_id` in queue order, wrapping to the start for skipped ones; None when done."""
    queue = review_queue(team=team, reviewer=reviewer, filters=filters)
    if after_rollout_id is None:
        return queue.first()
    return queue.filter(id__gt=after_rollout_id).first() or queue.exclude(id=after_rollout_id).first()


def label_history(rollout):
    """Every label of the rollout and its steps, oldest first: the audit trail (who, when, what, why)."""
    return RewardLabel.objects.filter(rollout=rollout).select_related("reviewer", "step").order_by("created_at", "id")


def rollouts_owed_by(*, viewer, rollouts=None):
    """The rollouts (of `rollouts`, a queryset; default all) on which `viewer` still owes one of the K
    independent reviews: a member who may review, has not decided it, and fewer than K humans have.

    Blind review rests on this one definition: until the viewer decides, no read path (label history,
    pages, exports, agreement figures) shows them another human's decision or rationale."""
    rollouts = Rollout.objects.all() if rollouts is None else rollouts
    if viewer is None or not getattr(viewer, "pk", None):
        return rollouts.none()
    review_roles = [role for role, permissions in ROLE_PERMISSIONS.items() if "review" in permissions]
    teams = Membership.objects.filter(user=viewer, role__in=review_roles).values("team_id")
    return (
        rollouts.filter(team_id__in=teams)
        .annotate(human_deciders_for_blind=_human_decider_count())
        .filter(human_deciders_for_blind__lt=Greatest(F("run__reviews_required"), Value(1)))
        .exclude(Exists(_rollout_labels().filter(source=LabelSource.HUMAN, reviewer=viewer)))
    )


def review_open_for(rollout, viewer) -> bool:
    """Whether `viewer` may still decide this rollout as one of its K independent reviews."""
    return rollouts_owed_by(viewer=viewer, rollouts=Rollout.objects.filter(pk=rollout.pk)).exists()


def label_visible_to(label: RewardLabel, viewer) -> bool:
    """Within a rollout the viewer owes a review: the verifier's labels and the viewer's own."""
    return label.source == LabelSource.VERIFIER or (viewer is not None and label.reviewer_id == viewer.pk)


def visible_labels(rollout, viewer) -> list[RewardLabel]:
    """The history as `viewer` may see it: a reviewer who still owes an independent review sees
    the verifier's labels only, so others' decisions cannot sway theirs."""
    labels = list(label_history(rollout))
    if review_open_for(rollout, viewer):
        return [label for label in labels if label_visible_to(label, viewer)]
    return labels


def annotations_for(*, rollout=None, version=None, run=None, tag: str | None = None):
    """Annotations of one rollout, or of every rollout of a version or run, oldest first."""
    annotations = Annotation.objects.select_related("author", "step")
    if rollout is not None:
        annotations = annotations.filter(rollout=rollout)
    if run is not None:
        annotations = annotations.filter(rollout__run=run)
    if version is not None:
        annotations = annotations.filter(rollout__run__environment_version=version)
    if tag:
        annotations = annotations.filter(tags__contains=[tag])
    return annotations.order_by("created_at", "id")


def cohen_kappa(pairs: list[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of two raters on pass/fail; None when chance agreement is total (undefined)."""
    n = len(pairs)
    if not n:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    a_pass = sum(1 for a, _ in pairs if a) / n
    b_pass = sum(1 for _, b in pairs if b) / n
    expected = a_pass * b_pass + (1 - a_pass) * (1 - b_pass)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def _human_pass(decision: str, value, verifier_pass: bool) -> bool:
    # approved keeps the verifier's verdict, rejected reverses it, an override says it with its value.
    if decision == LabelDecision.APPROVED:
        return verifier_pass
    if decision == LabelDecision.REJECTED:
        return not verifier_pass
    return value is not None and value > 0


def _round(x):
    return None if x is None else round(x, 4)


def agreement(*, version=None, run=None, viewer=None) -> dict:
    """Agreement figures on pass/fail (pass = reward > 0) over the rollouts of a version or a run.

    Each human reviewer's latest rollout-level decision is one rating; the verifier's is its proposal.
    With a `viewer`, human decisions on rollouts they still owe a review are left out (blind review).
    """
    if (version is None) == (run is None):
        raise ValueError("agreement() takes a version or a run")
    rollouts = Rollout.objects.filter(run=run) if run is not None else Rollout.objects.filter(run__environment_version=version)
    labels = RewardLabel.objects.filter(rollout__in=rollouts, step__isnull=True)
    if viewer is not None:
        owed = rollouts_owed_by(viewer=viewer, rollouts=rollouts).values("pk")
        labels = labels.exclude(Q(rollout__in=owed) & ~Q(source=LabelSource.VERIFIER))
    labels = (
        labels
        .order_by("rollout_id", "created_at", "id")
        .values_list("rollout_id", "source", "decision", "value", "reviewer_id")
    )
    verifier_pass: dict[int, bool] = {}
    ratings: dict[int, dict[int | None, tuple[str, float | None]]] = {}
    decisions = Counter()
    for rollout_id, source, decision, value, reviewer_id in labels.iterator(chunk_size=5000):
        if source == LabelSource.VERIFIER:
            verifier_pass[rollout_id] = value is not None and value > 0
        else:
            decisions[decision] += 1
            ratings.setdefault(rollout_id, {})[reviewer_id] = (decision, value)

    verifier_human: list[tuple[bool, bool]] = []
    human_pairs = agreeing_human_pairs = rollouts_multi = 0
    for rollout_id, by_reviewer in ratings.items():
        if rollout_id not in verifier_pass:
            continue
        v = verifier_pass[rollout_id]
        human = [_human_pass(decision, value, v) for decision, value in by_reviewer.values()]
        verifier_human.extend((v, h) for h in human)
        if len(human) > 1:
            rollouts_multi += 1
            for a, b in combinations(human, 2):
                human_pairs += 1
                agreeing_human_pairs += a == b

    tags = Counter()
    for row in Annotation.objects.filter(rollout__in=rollouts).values_list("tags", flat=True).iterator(chunk_size=5000):
        tags.update(row)

    human_decisions = sum(decisions.values())
    changed = decisions[LabelDecision.OVERRIDDEN] + decisions[LabelDecision.REJECTED]
    override_rate = changed / human_decisions if human_decisions else None
    compared = len(verifier_human)
    return {
        "rollouts": rollouts.count(),
        "rollouts_reviewed": len(ratings),
        "human_decisions": human_decisions,
        "approved": decisions[LabelDecision.APPROVED],
        "rejected": decisions[LabelDecision.REJECTED],
        "overridden": decisions[LabelDecision.OVERRIDDEN],
        "override_rate": _round(override_rate),
        "verifier_human": {
            "compared": compared,
            # Confusion matrix of the verifier's verdict (rows) against each human rating (columns).
            "confusion": {
                f"verifier_{'pass' if v else 'fail'}_human_{'pass' if h else 'fail'}": sum(1 for pair in verifier_human if pair == (v, h))
                for v in (True, False) for h in (True, False)
            },
            "agreement_rate": _round(sum(1 for a, b in verifier_human if a == b) / compared) if compared else None,
            "kappa": _round(cohen_kappa(verifier_human)),
        },
        "human_human": {
            "rollouts": rollouts_multi,
            "pairs": human_pairs,
            "agreement_rate": _round(agreeing_human_pairs / human_pairs) if human_pairs else None,
        },
        "tags": dict(sorted(tags.items(), key=lambda item: (-item[1], item[0]))),
        "verifier_often_overridden": bool(
            human_decisions >= FLAG_MIN_DECISIONS and override_rate is not None and override_rate >= FLAG_OVERRIDE_RATE
        ),
    }
