"""Rules that protect the training data: a rollout without a reward cannot be approved (page and API
say why), approved exports never carry a reward-less rollout, a refused override says why."""
import json

import pytest

from runs.models import Rollout, RolloutStatus
from runs.review import services
from runs.review.export import export_lines
from tests.conftest import api_for, login


@pytest.fixture
def errored(make_run):
    """A run whose second rollout errored before any verdict: no reward, no proposal."""
    run = make_run(rewards=(1.0, 0.0))
    rollout = run.rollouts.order_by("id")[1]
    Rollout.objects.filter(pk=rollout.pk).update(status=RolloutStatus.ERRORED, verifier_reward=None, error="env crashed")
    rollout.labels.all()._raw_delete(rollout.labels.db)  # an errored rollout never got a proposal
    rollout.refresh_from_db()
    return rollout


def test_a_rollout_without_a_reward_cannot_be_approved(errored, reviewer):
    with pytest.raises(services.InvalidDecision, match="no reward to approve"):
        services.label_decide(rollout=errored, actor=reviewer, decision="approved")
    assert not errored.labels.exists()
    # Rejecting it (the environment's fault) or overriding it with a value are the ways out.
    label = services.label_decide(rollout=errored, actor=reviewer, decision="rejected", rationale="env at fault")
    assert label.decision == "rejected"


def test_the_api_refuses_approval_without_a_reward_naming_the_field(errored, reviewer, team):
    response = api_for(reviewer, team).post(f"/rollouts/{errored.pk}/labels", {"decision": "approved"})
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "decision" and "no reward" in response.json()["detail"]


def test_the_review_page_says_why_approval_is_refused(errored, reviewer, team):
    response = login(reviewer).post(
        f"/t/{team.slug}/review/{errored.pk}/decide/", {"decision": "approved"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 400 and "no reward to approve" in response.content.decode()


def test_an_override_with_an_empty_rationale_is_refused_with_the_reason(make_run, reviewer, team):
    rollout = make_run().rollouts.first()
    response = login(reviewer).post(
        f"/t/{team.slug}/review/{rollout.pk}/decide/", {"decision": "overridden", "value": "0", "rationale": "  "},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 400 and "needs a rationale" in response.content.decode()
    assert not rollout.labels.filter(source="human").exists()


def test_approved_exports_never_contain_reward_less_rollouts(errored, reviewer, make_run):
    run = errored.run
    good = run.rollouts.order_by("id")[0]
    services.label_decide(rollout=good, actor=reviewer, decision="approved")
    # An old approval with no value (made before the rule) must not leave as training data either.
    services.label_decide(rollout=errored, actor=reviewer, decision="overridden", value=0.0, rationale="env at fault")
    from runs.models import RewardLabel

    RewardLabel.objects.create(team_id=errored.team_id, rollout=errored, source="human", value=None,
                               decision="approved", reviewer=reviewer)
    lines = [json.loads(line) for line in export_lines(run.rollouts.all(), decision="approved")]
    assert [line["rollout_id"] for line in lines] == [good.pk]
    assert all(line["label"]["value"] is not None for line in lines)
    chat = [json.loads(line) for line in export_lines(run.rollouts.all(), decision="approved", fmt="chat")]
    assert [line["reward"] for line in chat] == [1.0]


def test_bulk_approval_of_a_filtered_queue_follows_the_same_rules(make_run, reviewer, team):
    run = make_run(rewards=(1.0, 0.0, 1.0))
    api = api_for(reviewer, team)
    body = api.post(f"/review/bulk?outcome=pass&run={run.pk}", {"decision": "approved", "rationale": "looks right"}).json()
    passing = list(run.rollouts.filter(verifier_reward__gt=0).order_by("id").values_list("id", flat=True))
    assert body["decided"] == passing and body["refused"] == []
    assert api.post(f"/review/bulk?run={run.pk}", {"decision": "overridden"}).status_code == 422
    # The failing one is still in the queue; the approved ones have left it.
    assert [item["id"] for item in api.get("/review/queue", {"run": run.pk}).json()["items"]] == [
        r for r in run.rollouts.order_by("id").values_list("id", flat=True) if r not in passing
    ]


def test_bulk_refusals_come_back_with_their_reasons(make_run, reviewer, team):
    run = make_run(rewards=(1.0,))
    rollout = run.rollouts.get()
    from runs.models import RewardLabel

    # A proposal without a value (a verifier that answered None): nothing to approve.
    RewardLabel.objects.filter(rollout=rollout).delete()
    RewardLabel.objects.create(team_id=rollout.team_id, rollout=rollout, source="verifier", value=None, decision="proposed")
    body = api_for(reviewer, team).post(f"/review/bulk?run={run.pk}", {"decision": "approved"}).json()
    assert body["decided"] == [] and "no reward to approve" in body["refused"][0]["reason"]


def test_viewers_cannot_decide_in_bulk(make_run, viewer, team):
    run = make_run()
    assert api_for(viewer, team).post(f"/review/bulk?run={run.pk}", {"decision": "rejected"}).status_code == 403
    assert login(viewer).post(f"/t/{team.slug}/review/bulk/?run={run.pk}", {"decision": "rejected"}).status_code == 403


def test_the_queue_page_rejects_in_bulk_and_says_how_many(make_run, reviewer, team):
    run = make_run(rewards=(0.0, 0.0))
    response = login(reviewer).post(f"/t/{team.slug}/review/bulk/?run={run.pk}", {"decision": "rejected"}, follow=True)
    assert "Rejected 2 rollouts." in response.content.decode()
    assert not run.rollouts.exclude(labels__decision="rejected").exists()
