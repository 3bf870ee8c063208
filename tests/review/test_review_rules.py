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
