"""The review queue: what waits for whom, in what order, with K independent reviews per rollout."""
import threading

import pytest
from django.db import connection

from runs.models import Rollout
from runs.review import selectors, services
from runs.review.selectors import QueueFilters


def queue_ids(team, user, **filters):
    return list(selectors.review_queue(team=team, reviewer=user, filters=QueueFilters(**filters)).values_list("id", flat=True))


def test_queue_is_proposed_rollouts_oldest_first_and_next_walks_it(make_run, team, reviewer):
    ids = list(make_run([1.0, 0.0, 1.0, 0.0]).rollouts.order_by("id").values_list("id", flat=True))
    assert queue_ids(team, reviewer) == ids
    first = selectors.next_in_queue(team=team, reviewer=reviewer)
    assert first.pk == ids[0]
    services.label_decide(rollout=first, actor=reviewer, decision="approved")
    assert selectors.next_in_queue(team=team, reviewer=reviewer, after_rollout_id=ids[0]).pk == ids[1]
    # Skipping ids[1]: next goes on to ids[2], and after the last wraps round to the skipped one.
    assert selectors.next_in_queue(team=team, reviewer=reviewer, after_rollout_id=ids[1]).pk == ids[2]
    assert selectors.next_in_queue(team=team, reviewer=reviewer, after_rollout_id=ids[3]).pk == ids[1]
    assert queue_ids(team, reviewer) == ids[1:]


def test_next_is_none_when_the_queue_is_done(make_run, team, reviewer):
    (rollout,) = make_run([1.0]).rollouts.all()
    services.label_decide(rollout=rollout, actor=reviewer, decision="approved")
    assert selectors.next_in_queue(team=team, reviewer=reviewer, after_rollout_id=rollout.pk) is None


def test_rollouts_without_a_proposal_or_of_other_teams_are_not_queued(make_run, team, reviewer, other_team, outsider):
    run = make_run([1.0])
    Rollout.objects.create(team=team, run=run, task_id="t1", seed=9)  # still running: no label yet
    assert queue_ids(team, reviewer) == [run.rollouts.order_by("id").first().pk]
    assert queue_ids(other_team, outsider) == []


def test_overlap_k_reviews_then_the_rollout_leaves_the_queue(make_run, team, reviewer, owner, second_reviewer):
    (rollout,) = make_run([1.0], reviews_required=2).rollouts.all()
    services.label_decide(rollout=rollout, actor=reviewer, decision="approved")
    assert queue_ids(team, reviewer) == []  # decided: gone for this reviewer
    assert queue_ids(team, owner) == [rollout.pk] == queue_ids(team, second_reviewer)
    services.label_decide(rollout=rollout, actor=second_reviewer, decision="rejected")
    assert queue_ids(team, owner) == []  # K decisions: gone for everyone


def test_a_reviewer_does_not_see_others_decisions_before_deciding(make_run, reviewer, second_reviewer, viewer):
    (rollout,) = make_run([1.0], reviews_required=2).rollouts.all()
    services.label_decide(rollout=rollout, actor=reviewer, decision="overridden", value=0.0, rationale="guessed")
    assert [label.source for label in selectors.visible_labels(rollout, second_reviewer)] == ["verifier"]
    assert [label.source for label in selectors.visible_labels(rollout, reviewer)] == ["verifier", "human"]
    assert len(selectors.visible_labels(rollout, viewer)) == 2  # readers who cannot decide see the trail
    services.label_decide(rollout=rollout, actor=second_reviewer, decision="approved")
    assert len(selectors.visible_labels(rollout, second_reviewer)) == 3


def test_filters_narrow_the_queue(make_run, team, owner, reviewer, version):
    from tests.review.conftest import bulk_run
    from tests.runs.rollout_factories import package_version
    from tests.review.conftest import ENV_PY

    run_a = make_run([1.0, 0.0, 0.5])
    other_version = package_version(team, owner, "other-env", ENV_PY)
    run_b = bulk_run(team, owner, other_version, rewards=[2.0], agent_name="second")
    a = list(run_a.rollouts.order_by("id").values_list("id", flat=True))
    (b,) = run_b.rollouts.values_list("id", flat=True)
    assert queue_ids(team, reviewer, run_id=run_b.pk) == [b]
    assert queue_ids(team, reviewer, environment="counter-review") == a
    assert queue_ids(team, reviewer, environment="other-env", version=1) == [b]
    assert queue_ids(team, reviewer, agent_id=run_b.agent_id) == [b]
    assert queue_ids(team, reviewer, verifier_outcome="fail") == [a[1]]
    assert queue_ids(team, reviewer, verifier_outcome="pass") == [a[0], a[2], b]
    assert queue_ids(team, reviewer, min_reward=0.5, max_reward=1.0) == [a[0], a[2]]


@pytest.mark.django_db(transaction=True)
def test_two_reviewers_deciding_at_once_both_decisions_are_kept(make_run, reviewer, owner):
    (rollout,) = make_run([1.0]).rollouts.all()
    barrier = threading.Barrier(2)
    errors = []

    def decide(user, decision, value):
        try:
            r = Rollout.objects.select_related("run", "team").get(pk=rollout.pk)  # both opened the same item
            barrier.wait()
            services.label_decide(rollout=r, actor=user, decision=decision, value=value, rationale="mine")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(reviewer, "approved", None)),
               threading.Thread(target=decide, args=(owner, "overridden", 0.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    humans = rollout.labels.filter(source="human")
    assert sorted(humans.values_list("decision", flat=True)) == ["approved", "overridden"]
    assert set(humans.values_list("reviewer_id", flat=True)) == {reviewer.pk, owner.pk}
