"""The review API: each action's roles, team scope, validation errors naming the field."""
import json

import pytest

from tests.conftest import api_for


@pytest.fixture
def rollout(make_run):
    return make_run([1.0], steps=3).rollouts.get()


@pytest.mark.parametrize("who,status", [("owner", 201), ("reviewer", 201), ("author", 403), ("viewer", 403)])
def test_deciding_a_label_by_role(request, team, rollout, who, status):
    response = api_for(request.getfixturevalue(who), team).post(f"/rollouts/{rollout.pk}/labels", {"decision": "approved"})
    assert response.status_code == status, response.content
    assert rollout.labels.count() == (2 if status == 201 else 1)


@pytest.mark.parametrize("who,status", [("owner", 201), ("reviewer", 201), ("author", 201), ("viewer", 403)])
def test_annotating_by_role(request, team, rollout, who, status):
    response = api_for(request.getfixturevalue(who), team).post(
        f"/rollouts/{rollout.pk}/annotations", {"text": "odd", "tags": ["env-bug"], "step_index": 1})
    assert response.status_code == status, response.content


@pytest.mark.parametrize("who", ["owner", "reviewer", "author", "viewer"])
def test_every_member_reads_labels_annotations_agreement_and_exports(request, team, rollout, who):
    client = api_for(request.getfixturevalue(who), team)
    for path in (f"/rollouts/{rollout.pk}/labels", f"/rollouts/{rollout.pk}/annotations", f"/runs/{rollout.run_id}/agreement",
                 "/environments/counter-review/versions/1/agreement", "/review/queue", "/review/next",
                 f"/runs/{rollout.run_id}/export?decision=all", "/environments/counter-review/versions/1/export"):
        assert client.get(path).status_code == 200, path


def test_another_team_sees_nothing(outsider_api, rollout):
    for path in (f"/rollouts/{rollout.pk}/labels", f"/runs/{rollout.run_id}/agreement", f"/runs/{rollout.run_id}/export",
                 "/environments/counter-review/versions/1/agreement"):
        assert outsider_api.get(path).status_code == 404, path
    assert outsider_api.post(f"/rollouts/{rollout.pk}/labels", {"decision": "approved"}).status_code == 404
    assert outsider_api.get("/review/queue").json()["count"] == 0


def test_override_without_rationale_is_a_4xx_naming_the_field(owner_api, rollout):
    response = owner_api.post(f"/rollouts/{rollout.pk}/labels", {"decision": "overridden", "value": 0})
    assert response.status_code == 400 and response.json()["field"] == "rationale"
    response = owner_api.post(f"/rollouts/{rollout.pk}/labels", {"decision": "maybe"})
    assert response.status_code == 422 and response.json()["field"] == "decision"
    response = owner_api.post(f"/rollouts/{rollout.pk}/labels", {"decision": "approved", "step_index": 99})
    assert response.status_code == 400 and response.json()["field"] == "step_index"


def test_queue_next_decide_and_history_through_the_api(team, reviewer, owner, make_run):
    run = make_run([1.0, 0.0], reviews_required=2)
    a, b = run.rollouts.order_by("id").values_list("id", flat=True)
    rita, olivia = api_for(reviewer, team), api_for(owner, team)
    page = rita.get("/review/queue", {"outcome": "pass"}).json()
    assert page["count"] == 1 and page["items"][0]["id"] == a and page["items"][0]["reviews_required"] == 2
    assert rita.get("/review/next", {"count": "true"}).json()["item"]["id"] == a
    assert rita.post(f"/rollouts/{a}/labels", {"decision": "overridden", "value": 0.25, "rationale": "partly"}).status_code == 201
    assert rita.post(f"/rollouts/{a}/labels", {"decision": "approved"}).status_code == 409
    nxt = rita.get("/review/next", {"after": a, "count": "true"}).json()
    assert nxt["item"]["id"] == b and nxt["remaining"] == 1
    hidden = olivia.get(f"/rollouts/{a}/labels").json()
    assert hidden["review_open_for_you"] is True and [label["source"] for label in hidden["history"]] == ["verifier"]
    olivia.post(f"/rollouts/{a}/labels", {"decision": "approved"})
    shown = olivia.get(f"/rollouts/{a}/labels").json()
    assert [label["decision"] for label in shown["history"]] == ["proposed", "overridden", "approved"]
    assert shown["current"]["decision"] == "approved" and shown["current"]["reviewer"] == "olivia"
    figures = olivia.get(f"/runs/{run.pk}/agreement").json()
    assert figures["human_human"]["pairs"] == 1 and figures["overridden"] == 1


def test_export_endpoint_streams_ndjson_with_a_filename(owner_api, rollout, reviewer):
    from runs.review import services

    services.label_decide(rollout=rollout, actor=reviewer, decision="approved")
    response = owner_api.get(f"/runs/{rollout.run_id}/export")
    assert response.streaming and response["Content-Type"] == "application/x-ndjson"
    assert f'filename="run-{rollout.run_id}-approved.jsonl"' in response["Content-Disposition"]
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(line)["rollout_id"] for line in lines] == [rollout.pk]
    chat = owner_api.get("/environments/counter-review/versions/1/export", {"format": "chat", "decision": "all"})
    assert json.loads(b"".join(chat.streaming_content))["messages"][0]["role"] == "system"
    assert owner_api.get(f"/runs/{rollout.run_id}/export", {"decision": "nope"}).status_code == 422
