"""Review pages: who may decide, team scoping, the decision form's errors, page exports."""
import json

import pytest

from runs.models import RewardLabel
from tests.conftest import login


@pytest.fixture
def proposed(team, owner):
    from runs.models import Agent, LabelDecision, LabelSource, Rollout, RolloutStatus, Run
    from tests.runs.rollout_factories import demo_version

    version = demo_version(team, owner, "guess_number")
    agent = Agent.objects.create(team=team, name="random", kind="random")
    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t1"], seeds=[0])
    rollout = Rollout.objects.create(team=team, run=run, task_id="t1", seed=0, status=RolloutStatus.SUCCEEDED,
                                     verifier_reward=1.0, verifier_reason="guessed it", step_count=0)
    RewardLabel.objects.create(team=team, rollout=rollout, source=LabelSource.VERIFIER, value=1.0,
                               decision=LabelDecision.PROPOSED, rationale="guessed it")
    return rollout


def test_reviewer_sees_queue_and_decides(reviewer, proposed):
    c = login(reviewer)
    assert f"review/{proposed.pk}/" in c.get("/t/alpha/review/").content.decode()
    r = c.post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": "approved"})
    assert r.status_code == 302
    assert RewardLabel.objects.filter(rollout=proposed, source="human", decision="approved", value=1.0).exists()
    c.get("/t/alpha/review/")  # the flash message names the rollout once
    assert f"review/{proposed.pk}/" not in c.get("/t/alpha/review/").content.decode()


def test_override_without_rationale_is_refused_and_named(reviewer, proposed):
    r = login(reviewer).post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": "overridden", "value": "0"}, headers={"HX-Request": "true"})
    assert r.status_code == 400 and "rationale" in r.content.decode()
    r = login(reviewer).post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": "overridden", "value": "zero", "rationale": "x"}, headers={"HX-Request": "true"})
    assert r.status_code == 400 and "number" in r.content.decode()
    assert not RewardLabel.objects.filter(source="human").exists()


@pytest.mark.parametrize("fixture", ["author", "viewer"])
def test_authors_and_viewers_read_but_cannot_decide(request, proposed, fixture):
    user = request.getfixturevalue(fixture)
    c = login(user)
    assert c.get(f"/t/alpha/review/{proposed.pk}/").status_code == 200
    assert c.post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": "approved"}).status_code == 403
    assert not RewardLabel.objects.filter(source="human").exists()


def test_outsider_gets_404_on_review_pages_and_exports(outsider, proposed):
    c = login(outsider)
    for url in ["/t/alpha/review/", f"/t/alpha/review/{proposed.pk}/", f"/t/alpha/runs/{proposed.run_id}/export.jsonl",
                "/t/alpha/environments/guess-number/versions/1/export.jsonl"]:
        assert c.get(url).status_code == 404, url
    assert c.post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": "approved"}).status_code == 404
    assert c.post(f"/t/alpha/review/{proposed.pk}/annotate/", {"text": "x"}).status_code == 404


def test_annotation_on_the_page_and_agreement_on_the_version(reviewer, owner, proposed):
    c = login(reviewer)
    r = c.post(f"/t/alpha/review/{proposed.pk}/annotate/", {"text": "too easy", "tags": ["reward-hack"], "step": "-1"})
    assert r.status_code == 200 and "reward-hack" in r.content.decode()
    c.post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": "rejected"})
    page = login(owner).get("/t/alpha/environments/guess-number/versions/1/").content.decode()
    assert "Review agreement" in page and "reward-hack 1" in page and "too easy" in page


def test_page_export_streams_jsonl(owner, reviewer, proposed):
    login(reviewer).post(f"/t/alpha/review/{proposed.pk}/decide/", {"decision": "approved"})
    r = login(owner).get(f"/t/alpha/runs/{proposed.run_id}/export.jsonl?decision=approved")
    assert r.streaming and r["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(x) for x in b"".join(r.streaming_content).decode().splitlines()]
    assert len(lines) == 1 and lines[0]["task_id"] == "t1"
    assert login(owner).get(f"/t/alpha/runs/{proposed.run_id}/export.jsonl?decision=bogus").status_code == 400
