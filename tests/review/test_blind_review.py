"""Blind review on every read path: a reviewer who still owes one of a rollout's K independent reviews
sees neither another human's decision nor its rationale, through the run export, the version export,
the filtered review export (API and pages) or the agreement figures (API and pages). Once they have
decided, or once the K reviews are in, everything shows."""
import json

import pytest

from runs.review import services
from runs.review.export import export_lines
from tests.conftest import api_for, login

SECRET = "rita-thinks-the-verifier-is-wrong"


@pytest.fixture
def decided_by_rita(make_run, reviewer, second_reviewer):
    """Two reviews wanted; rita has overridden both rollouts, rosa (second_reviewer) has not decided yet."""
    run = make_run([1.0, 0.0], reviews_required=2)
    for rollout in run.rollouts.order_by("id"):
        services.label_decide(rollout=rollout, actor=reviewer, decision="overridden", value=0.25, rationale=SECRET)
    return run


def export_texts(client, api, run):
    pages = [
        f"/t/alpha/runs/{run.pk}/export.jsonl?decision=all",
        f"/t/alpha/runs/{run.pk}/export.jsonl",
        "/t/alpha/environments/counter-review/versions/1/export.jsonl?decision=all",
        f"/t/alpha/runs/{run.pk}/export.jsonl?decision=all&format=chat",
    ]
    apis = [
        f"/runs/{run.pk}/export?decision=all", f"/runs/{run.pk}/export?decision=overridden",
        "/environments/counter-review/versions/1/export?decision=all", "/review/export?decision=all",
        "/review/export", f"/runs/{run.pk}/export?decision=all&format=chat",
    ]
    texts = {}
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        # A page export that matches nothing is a page saying so, not an empty download.
        texts[url] = b"".join(response.streaming_content).decode() if response.streaming else ""
        if not response.streaming:
            assert "0 rollouts match" in response.content.decode(), url
    for url in apis:
        response = api.get(url)
        assert response.status_code == 200, url
        texts[url] = b"".join(response.streaming_content).decode()
    return texts


def test_exports_hide_other_decisions_from_a_reviewer_who_owes_one(decided_by_rita, second_reviewer, team):
    texts = export_texts(login(second_reviewer), api_for(second_reviewer, team), decided_by_rita)
    for url, text in texts.items():
        assert SECRET not in text, url
        assert "rita" not in text, url
        assert "overridden" not in text, url
        for line in text.splitlines():
            row = json.loads(line)
            label = row.get("label") or row["metadata"]["label"]
            assert label["decision"] == "proposed", (url, label)
    # approved/overridden exports would imply a human decision: nothing in them for rosa
    assert texts[f"/t/alpha/runs/{decided_by_rita.pk}/export.jsonl"] == ""
    assert texts["/review/export"] == ""


def test_exports_show_everything_once_the_reviewer_has_decided(decided_by_rita, second_reviewer, team):
    for rollout in decided_by_rita.rollouts.all():
        services.label_decide(rollout=rollout, actor=second_reviewer, decision="approved")
    texts = export_texts(login(second_reviewer), api_for(second_reviewer, team), decided_by_rita)
    rows = [json.loads(line) for line in texts[f"/runs/{decided_by_rita.pk}/export?decision=all"].splitlines()]
    assert [row["label"]["decision"] for row in rows] == ["approved", "approved"]
    assert len(texts["/review/export"].splitlines()) == 2


def test_an_owner_who_may_review_is_blind_too(decided_by_rita, owner, team):
    # Owners may review: while they owe one of the K reviews, they are as blind as rosa.
    texts = export_texts(login(owner), api_for(owner, team), decided_by_rita)
    assert SECRET not in texts[f"/runs/{decided_by_rita.pk}/export?decision=all"]
    assert SECRET in "".join(export_lines(decided_by_rita.rollouts.all(), decision="all"))  # the operator's CLI export


def test_a_viewer_without_review_rights_sees_the_decisions(decided_by_rita, viewer, team):
    texts = export_texts(login(viewer), api_for(viewer, team), decided_by_rita)
    assert SECRET in texts[f"/runs/{decided_by_rita.pk}/export?decision=all"]


def test_agreement_hides_other_decisions_from_a_reviewer_who_owes_one(decided_by_rita, second_reviewer, viewer, team):
    run = decided_by_rita
    api = api_for(second_reviewer, team)
    for url in (f"/runs/{run.pk}/agreement", "/environments/counter-review/versions/1/agreement"):
        figures = api.get(url).json()
        assert figures["human_decisions"] == 0 and figures["overridden"] == 0, (url, figures)
        assert figures["verifier_human"]["compared"] == 0
    seen = api_for(viewer, team).get(f"/runs/{run.pk}/agreement").json()
    assert seen["overridden"] == 2


def test_agreement_on_pages_hides_other_decisions(decided_by_rita, second_reviewer, viewer):
    for url in (f"/t/alpha/runs/{decided_by_rita.pk}/", "/t/alpha/environments/counter-review/versions/1/"):
        blind = login(second_reviewer).get(url)
        assert blind.status_code == 200
        assert blind.context["agreement"]["human_decisions"] == 0, url
        assert login(viewer).get(url).context["agreement"]["human_decisions"] == 2, url


def test_label_history_rollout_and_review_pages_hide_other_decisions(decided_by_rita, second_reviewer, viewer, team):
    rollout = decided_by_rita.rollouts.order_by("id").first()
    api, page = api_for(second_reviewer, team), login(second_reviewer)
    reads = {
        "labels API": api.get(f"/rollouts/{rollout.pk}/labels"), "rollout API": api.get(f"/rollouts/{rollout.pk}"),
        "rollout page": page.get(f"/t/alpha/rollouts/{rollout.pk}/"), "review page": page.get(f"/t/alpha/review/{rollout.pk}/"),
    }
    for name, response in reads.items():
        assert response.status_code == 200, name
        assert SECRET not in response.content.decode() and "rita" not in response.content.decode(), name
    assert api.get(f"/rollouts/{rollout.pk}/labels").json()["review_open_for_you"] is True
    assert SECRET in api_for(viewer, team).get(f"/rollouts/{rollout.pk}/labels").content.decode()


def test_blind_agreement_equals_the_same_run_without_the_decisions_the_viewer_owes(make_run, team, owner, reviewer,
                                                                                  second_reviewer, viewer):
    """Three reviews wanted; four members decide 16 rollouts in a seeded order, some change their mind,
    some labels arrive several in one statement. For each member, the figures they see equal those of a
    twin run holding only the human decisions of the rollouts they do not owe (kept by BlindTally in a
    fixed number of rows, not by reading the rollouts owed)."""
    import random

    from runs.models import LabelDecision, LabelSource, RewardLabel
    from runs.review.selectors import agreement, rollouts_owed_by
    from studio.models import Membership, Role
    from tests.conftest import make_user

    third = make_user("rhea")
    Membership.objects.create(team=team, user=third, role=Role.REVIEWER)
    people = [owner, reviewer, second_reviewer, third]
    rng = random.Random(16)
    rewards = [rng.choice([0.0, 1.0]) for _ in range(16)]
    plan = []  # (rollout index, person index, decision, value), in the order they are written
    for index in range(16):
        for person in rng.sample(range(4), rng.choice([0, 1, 1, 2, 2, 3])):
            decision = rng.choice([LabelDecision.APPROVED, LabelDecision.REJECTED, LabelDecision.OVERRIDDEN])
            plan.append((index, person, decision, rng.choice([0.0, 0.5]) if decision == LabelDecision.OVERRIDDEN else None))
    rng.shuffle(plan)
    plan += [(index, person, LabelDecision.REJECTED, None) for index, person, _, _ in plan[:3]]  # changes of mind

    def write(run, steps):
        rollouts = list(run.rollouts.order_by("seed"))
        labels = [RewardLabel(team=team, rollout=rollouts[i], source=LabelSource.HUMAN, decision=d, value=v,
                              reviewer=people[p]) for i, p, d, v in steps]
        for start in range(0, len(labels), 5):  # several labels per statement, sometimes of one rollout
            RewardLabel.objects.bulk_create(labels[start: start + 5])

    run = make_run(rewards, reviews_required=3)
    write(run, plan)
    for member in people:
        owed = set(rollouts_owed_by(viewer=member, rollouts=run.rollouts.all()).values_list("seed", flat=True))
        assert 0 < len(owed) < 16, member  # the case under test: some owed, some not
        twin = make_run(rewards, reviews_required=3)
        write(twin, [step for step in plan if step[0] not in owed])
        assert agreement(run=run, viewer=member) == agreement(run=twin), member.username
    # A member who may not review owes nothing: they see every decision.
    assert agreement(run=run, viewer=viewer) == agreement(run=run)
