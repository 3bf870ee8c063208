"""Reward labels are an append-only history: decisions add rows, the database refuses updates."""
import pytest
from django.db import IntegrityError, connection, transaction

from runs.models import RewardLabel
from runs.review import selectors, services
from runs.review.services import AlreadyDecided, InvalidDecision, ReviewForbidden


def test_decisions_append_rows_and_the_latest_is_current(make_run, reviewer, owner, team):
    rollout = make_run([1.0]).rollouts.get()
    services.label_decide(rollout=rollout, actor=reviewer, decision="approved")
    services.label_decide(rollout=rollout, actor=owner, decision="overridden", value=0.0, rationale="answer was guessed")
    history = list(selectors.label_history(rollout))
    assert [(label.source, label.decision, label.value) for label in history] == [
        ("verifier", "proposed", 1.0), ("human", "approved", 1.0), ("human", "overridden", 0.0),
    ]
    assert history[2].reviewer == owner and history[2].rationale == "answer was guessed"
    from runs.selectors import current_label

    assert current_label(rollout).pk == history[-1].pk


def test_database_refuses_update_of_a_label_row(make_run):
    label = make_run([1.0]).rollouts.get().labels.get()
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE runs_rewardlabel SET value = 0 WHERE id = %s", [label.pk])
    with pytest.raises(IntegrityError), transaction.atomic():
        RewardLabel.objects.filter(pk=label.pk).update(decision="approved")
    label.refresh_from_db()
    assert (label.value, label.decision) == (1.0, "proposed")


def test_saving_an_existing_label_is_refused_in_code(make_run):
    label = make_run([1.0]).rollouts.get().labels.get()
    label.value = 3.0
    with pytest.raises(ValueError, match="append-only"):
        label.save()


def test_an_override_needs_a_value_and_a_rationale(make_run, reviewer):
    rollout = make_run([1.0]).rollouts.get()
    with pytest.raises(InvalidDecision) as missing_value:
        services.label_decide(rollout=rollout, actor=reviewer, decision="overridden", rationale="why")
    assert missing_value.value.field == "value"
    with pytest.raises(InvalidDecision) as missing_rationale:
        services.label_decide(rollout=rollout, actor=reviewer, decision="overridden", value=0.0, rationale="  ")
    assert missing_rationale.value.field == "rationale"
    with pytest.raises(InvalidDecision):
        services.label_decide(rollout=rollout, actor=reviewer, decision="proposed")
    assert rollout.labels.count() == 1


def test_a_reject_needs_no_rationale_and_keeps_no_value(make_run, reviewer):
    rollout = make_run([1.0]).rollouts.get()
    label = services.label_decide(rollout=rollout, actor=reviewer, decision="rejected")
    assert (label.decision, label.value, label.rationale) == ("rejected", None, "")


def test_a_reviewer_decides_once_while_other_reviews_are_owed(make_run, reviewer, owner):
    rollout = make_run([1.0], reviews_required=2).rollouts.get()
    services.label_decide(rollout=rollout, actor=reviewer, decision="approved")
    with pytest.raises(AlreadyDecided):
        services.label_decide(rollout=rollout, actor=reviewer, decision="rejected")
    services.label_decide(rollout=rollout, actor=owner, decision="approved")
    # Reviews complete: a later correction is appended like any decision.
    services.label_decide(rollout=rollout, actor=reviewer, decision="overridden", value=0.5, rationale="partial")
    assert rollout.labels.filter(source="human").count() == 3


def test_step_labels_sit_beside_the_rollout_label(make_run, reviewer):
    rollout = make_run([1.0], steps=3).rollouts.get()
    step = rollout.steps.get(index=1)
    services.label_decide(rollout=rollout, actor=reviewer, decision="overridden", value=-1, rationale="hack", step=step)
    from runs.selectors import with_current_label

    assert with_current_label(rollout.__class__.objects.filter(pk=rollout.pk)).get().current_label_decision == "proposed"
    assert [label.step_id for label in selectors.label_history(rollout)] == [None, step.pk]


def test_authors_and_viewers_cannot_decide(make_run, author, viewer, outsider):
    rollout = make_run([1.0]).rollouts.get()
    for user in (author, viewer, outsider):
        with pytest.raises(ReviewForbidden):
            services.label_decide(rollout=rollout, actor=user, decision="approved")
    assert rollout.labels.count() == 1


def test_annotations_normalize_tags_and_need_content(make_run, reviewer, author, viewer):
    rollout = make_run([1.0]).rollouts.get()
    note = services.annotation_add(rollout=rollout, actor=reviewer, text="looks gamed",
                                   tags=["Reward Hack", "reward-hack", "env-bug"], step=rollout.steps.get(index=0))
    assert note.tags == ["reward-hack", "env-bug"]
    assert services.annotation_add(rollout=rollout, actor=author, text="", tags=["env-bug"]).tags == ["env-bug"]
    with pytest.raises(services.InvalidAnnotation):
        services.annotation_add(rollout=rollout, actor=reviewer, text=" ", tags=[])
    with pytest.raises(ReviewForbidden):
        services.annotation_add(rollout=rollout, actor=viewer, text="hi", tags=[])
