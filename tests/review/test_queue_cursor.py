"""A reviewer's queue read from their cursor (runs.review.selectors.queue_cursor) equals the queue by its
definition (every open review state they did not decide, in rollout id order) whatever happens between
reads: they decide in order or skip around, others decide, rollouts open late behind the cursor."""
import random
import threading

import pytest
from django.db import connection, transaction

from runs.models import LabelDecision, LabelSource, ReviewCursor, ReviewState, RewardLabel
from runs.review import selectors
from studio.models import Membership, Role
from tests.conftest import make_user


def test_queue_from_the_cursor_equals_the_queue_by_definition(make_run, team, owner, reviewer, monkeypatch):
    monkeypatch.setattr(selectors, "CURSOR_HOLES", 3)  # a small limit, so every branch of a move is taken
    third = make_user("rhea")
    Membership.objects.create(team=team, user=third, role=Role.REVIEWER)
    people = [owner, reviewer, third]
    rng = random.Random(20)
    run = make_run([rng.choice([0.0, 1.0]) for _ in range(40)], reviews_required=2)
    rollouts = list(run.rollouts.order_by("id"))
    # Ten rollouts have no proposal yet: they open later, behind the cursors.
    late = rollouts[5:40:4]
    RewardLabel.objects.filter(rollout__in=late).delete()
    # (The review states of the late ones were made by their deleted proposals: start them over.)
    ReviewState.objects.filter(rollout__in=late).update(has_proposal=False, open=False, proposed_reward=None)

    def by_definition(person):
        return list(selectors._queue_states(team=team, reviewer=person).values_list("rollout_id", flat=True))

    def check(person):
        expected = by_definition(person)
        assert [r.pk for r in selectors.review_queue_page(team=team, reviewer=person, limit=7)] == expected[:7]
        head, count = selectors.review_queue_head(team=team, reviewer=person, limit=4, most=10)
        assert [r.pk for r in head] == expected[:4] and count == min(len(expected), 11)
        assert selectors.review_queue_count(team=team, reviewer=person) == len(expected)
        assert list(selectors.review_queue(team=team, reviewer=person).values_list("id", flat=True)) == expected
        if expected:
            middle = expected[len(expected) // 2]
            after = [r.pk for r in selectors.review_queue_page(team=team, reviewer=person, after=middle, limit=3)]
            assert after == [i for i in expected if i > middle][:3]

    for step in range(60):
        person = rng.choice(people)
        action = rng.random()
        if action < 0.5:
            # Decide: mostly the next item of their queue (reviewers go in order), sometimes any open one.
            queue = by_definition(person)
            if queue:
                target = queue[0] if rng.random() < 0.7 else rng.choice(queue)
                RewardLabel.objects.create(team=team, rollout_id=target, source=LabelSource.HUMAN,
                                           decision=LabelDecision.APPROVED, value=1.0, reviewer=person)
        elif action < 0.65 and late:
            rollout = late.pop(rng.randrange(len(late)))
            RewardLabel.objects.create(team=team, rollout=rollout, source=LabelSource.VERIFIER, value=1.0,
                                       decision=LabelDecision.PROPOSED)
        check(person)
    assert ReviewCursor.objects.filter(team=team).count() == 3
    # The cursors moved on: a reviewer who decided things no longer starts from the first open state.
    assert any(c.below > rollouts[0].pk for c in ReviewCursor.objects.filter(team=team))


@pytest.mark.django_db(transaction=True)
def test_a_rollout_opening_while_a_cursor_moves_past_it_still_reaches_the_queue(make_run, team, reviewer):
    """The race the team lock is for: a rollout behind the cursor gets its first proposal while the cursor
    is being moved. The opening waits for the move to commit (the move cannot see it), then joins the
    cursor's holes: the next read shows it."""
    run = make_run([1.0, 0.0, 1.0, 0.0], reviews_required=2)
    first, late, *rest = run.rollouts.order_by("id")
    RewardLabel.objects.filter(rollout=late).delete()
    ReviewState.objects.filter(rollout=late).update(has_proposal=False, open=False, proposed_reward=None)
    for rollout in (first, *rest):  # the reviewer decides every open one: their cursor moves past `late`
        RewardLabel.objects.create(team=team, rollout=rollout, source=LabelSource.HUMAN,
                                   decision=LabelDecision.APPROVED, value=1.0, reviewer=reviewer)
    assert selectors.review_queue_page(team=team, reviewer=reviewer) == []
    opened = threading.Event()

    def open_late():
        try:
            RewardLabel.objects.create(team=team, rollout=late, source=LabelSource.VERIFIER, value=1.0,
                                       decision=LabelDecision.PROPOSED)
            opened.set()
        finally:
            connection.close()

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [selectors.CURSOR_LOCK, team.pk])
        opener = threading.Thread(target=open_late)
        opener.start()
        assert not opened.wait(0.5)  # the opening waits for the team's lock ...
        selectors.queue_cursor(team=team, reviewer=reviewer)  # ... while the cursor moves, blind to it
    opener.join(5)
    assert opened.is_set()
    assert [r.pk for r in selectors.review_queue_page(team=team, reviewer=reviewer)] == [late.pk]
