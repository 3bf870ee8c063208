"""Labels in layers: a rollout's rollout-level labels are human decisions (approve, reject, override; each by
its reviewer) and verifier labels, each by a verifier version (the run's own at the episode's end, another
one's by re-verification). Nothing is ever updated or hidden; what the layers decide:

- the *current* label (the reward for export and training) is the latest human decision where one exists,
  else the newest label of the run's own verifier: a newer verifier never supersedes a human;
- the *proposal* is the newest label of the run's own verifier (what "approve" keeps, what the queue filters);
- a rollout is in *disagreement* when, for some verifier version, its newest label is newer than the latest
  human decision and its pass verdict (value > 0) differs from the human's.

The database keeps the same rules (runs/sql/label_layers.sql: review state, agreement tallies); this module is
their Python reference (over a rollout's labels, oldest first) and the queryset form pages and exports use."""
from dataclasses import dataclass

from django.db.models import Case, IntegerField, OuterRef, Q, Value, When

from .models import LabelDecision, LabelSource, RewardLabel


def own_layer(*, run_version="run__environment_version_id") -> Q:
    """Labels that may be current: human decisions and the run's own verifier's (`run_version`: the lookup,
    or an OuterRef, of the run's version id)."""
    version = OuterRef(run_version) if isinstance(run_version, str) else run_version
    return Q(source=LabelSource.HUMAN) | Q(verifier_version__isnull=True) | Q(verifier_version_id=version)


def current_labels_of_outer_rollout():
    """The current label first, for a subquery over the outer queryset's rollouts (`[:1]` of it)."""
    return (
        RewardLabel.objects.filter(rollout=OuterRef("pk"), step__isnull=True)
        .filter(own_layer(run_version=OuterRef("run__environment_version_id")))
        .annotate(human_first=Case(When(source=LabelSource.HUMAN, then=Value(1)), default=Value(0), output_field=IntegerField()))
        .order_by("-human_first", "-created_at", "-id")
    )


def _is_own(label, own_version_id) -> bool:
    return label.verifier_version_id is None or label.verifier_version_id == own_version_id


def _newest(labels):
    return max(labels, key=lambda label: (label.created_at, label.pk), default=None)


def _passes(label) -> bool:
    return label.value is not None and label.value > 0


def current_label_of(labels, *, own_version_id):
    humans = [label for label in labels if label.source == LabelSource.HUMAN]
    return _newest(humans) or proposal_of(labels, own_version_id=own_version_id)


def proposal_of(labels, *, own_version_id):
    return _newest([label for label in labels if label.source == LabelSource.VERIFIER and _is_own(label, own_version_id)])


@dataclass(frozen=True)
class Layer:
    """A verifier version's newest label on a rollout, against the latest human decision."""

    verifier_version_id: int
    passes: bool
    newer: bool  # than the latest human decision
    human_passes: bool | None  # None: no human verdict


def human_verdict(labels, *, own_version_id) -> bool | None:
    """The latest human decision's pass verdict: by its value, or for a rejection without one the opposite
    of the proposal it rejected; None without a decision."""
    human = _newest([label for label in labels if label.source == LabelSource.HUMAN])
    if human is None:
        return None
    if human.value is not None:
        return human.value > 0
    if human.decision == LabelDecision.REJECTED:
        earlier = [label for label in labels if (label.created_at, label.pk) < (human.created_at, human.pk)]
        rejected = proposal_of(earlier, own_version_id=own_version_id)
        return None if rejected is None else not _passes(rejected)
    return None


def layers_of(labels, *, own_version_id) -> list[Layer]:
    human = _newest([label for label in labels if label.source == LabelSource.HUMAN])
    verdict = human_verdict(labels, own_version_id=own_version_id)
    by_version: dict[int, list] = {}
    for label in labels:
        if label.source == LabelSource.VERIFIER:
            by_version.setdefault(label.verifier_version_id or own_version_id, []).append(label)
    layers = []
    for version_id, group in sorted(by_version.items()):
        newest = _newest(group)
        newer = human is not None and (newest.created_at, newest.pk) > (human.created_at, human.pk)
        layers.append(Layer(version_id, _passes(newest), newer, verdict))
    return layers


def in_disagreement(labels, *, own_version_id) -> bool:
    return any(layer.newer and layer.human_passes is not None and layer.passes != layer.human_passes
               for layer in layers_of(labels, own_version_id=own_version_id))


def verifier_counts(labels, *, own_version_id) -> dict[int, dict]:
    """One rollout's contribution to VerifierTally, per verifier version."""
    return {
        layer.verifier_version_id: {
            "labelled": 1, "compared": int(layer.human_passes is not None),
            "agreeing": int(layer.human_passes is not None and layer.passes == layer.human_passes),
            "disagreements": int(layer.newer and layer.human_passes is not None and layer.passes != layer.human_passes),
        }
        for layer in layers_of(labels, own_version_id=own_version_id)
    }
