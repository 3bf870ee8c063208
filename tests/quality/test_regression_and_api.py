"""Verifier regression and re-verification from human labels, and the quality lab's API and pages
(team scoping, 4xx for bad input, escaped text)."""
import pytest
from django.db.models import F
from django.urls import reverse

from environments import services as env_services
from runs.models import LabelDecision, LabelSource, RewardLabel, RolloutStatus
from runs.quality import services
from runs.quality.models import Audit, AuditStatus, Reverification
from runs.quality.tasks import execute_reverification
from tests.conftest import api_for, login
from tests.runs.rollout_factories import package_version, play_run, random_agent
from runs import services as run_services

from tests.quality.audits import passed_audit, play_audit

pytestmark = pytest.mark.django_db(transaction=True)

COUNTER = """
class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        self.total, self.n = 0, 0
        return {"total": 0}

    def step(self, action):
        self.total += int(action)
        self.n += 1
        return {"total": self.total}, 0.0, self.n >= 3, False, {}

    def verify(self):
        return VERDICT
"""
STRICT = '(1.0 if self.total >= 2 else 0.0), f"total {self.total}"'
LENIENT = '1.0, "looks fine"'


@pytest.fixture
def labelled_v1(team, owner):
    """counter@1 with a strict verifier, 6 random rollouts, each approved by a human."""
    v1 = package_version(team, owner, "counter2", COUNTER.replace("VERDICT", STRICT), max_steps=5)
    run = run_services.run_create(team=team, actor=owner, version=v1, agent=random_agent(team, owner), seeds=list(range(6)), enqueue=False)
    rollouts = play_run(run)
    for rollout in rollouts:
        RewardLabel.objects.create(team=team, rollout=rollout, source=LabelSource.HUMAN, decision=LabelDecision.APPROVED,
                                   value=rollout.verifier_reward, reviewer=owner)
    return v1, rollouts


def test_a_lenient_new_verifier_disagrees_with_the_human_labels_and_each_flip_is_listed(team, owner, labelled_v1):
    v1, rollouts = labelled_v1
    failing = [r.pk for r in rollouts if r.verifier_reward == 0.0]
    assert failing, "the seeds should give some failures"
    v2 = env_services.version_commit(environment=v1.environment, actor=owner, message="lenient",
                                     files={**v1.files, "env.py": COUNTER.replace("VERDICT", LENIENT)})
    audit = play_audit(services.audit_start(version=v2, actor=owner, seeds=[0]))
    regression = audit.report["regression"]
    assert regression["cases"] == 6 and sorted(case["rollout"] for case in regression["flipped"]) == sorted(failing)
    line = next(entry for entry in audit.report["lines"] if entry["check"] == "regression")
    assert line["level"] == "red" and line["rollout"] in failing

    # Re-verification, a background job: the same replays become new verifier labels, after the human ones.
    before = RewardLabel.objects.count()
    job = services.reverification_start(version=v2, source=v1, actor=owner)
    assert (job.status, job.total, job.replayed) == ("queued", 6, 0)
    assert execute_reverification(job.pk) == "done"
    job.refresh_from_db()
    assert (job.status, job.replayed, job.labelled, job.skipped) == ("done", 6, 6, [])
    assert RewardLabel.objects.count() == before + 6
    latest = RewardLabel.objects.filter(rollout_id=failing[0]).order_by("-id")
    assert [(label.source, label.value) for label in latest[:2]] == [("verifier", 1.0), ("human", 0.0)]
    assert latest[0].rationale.startswith("re-verified by counter2@2")
    # Delivered twice: the ended job is left alone, nothing is labelled again.
    assert execute_reverification(job.pk) == "nothing to do" and RewardLabel.objects.count() == before + 6


def test_reverification_is_refused_for_a_version_whose_episodes_do_not_repeat(team, owner, owner_api, labelled_v1):
    v1, _ = labelled_v1
    with pytest.raises(services.InvalidAudit, match="Audit counter2@1 first"):
        services.reverification_start(version=v1, source=v1, actor=owner)
    Audit.objects.create(team=team, environment_version=v1, status=AuditStatus.FLAGGED, seeds=[0],
                         report={"determinism": {"divergent": [{"task_id": "t1"}]}})
    response = owner_api.post("/reverify", {"version": "counter2@1"})
    assert response.status_code == 400 and response.json()["field"] == "version"
    assert "do not repeat" in response.json()["detail"] and not Reverification.objects.exists()


def test_api_queues_a_reverification_and_shows_its_progress_to_the_team_only(team, owner, owner_api, outsider_api, labelled_v1):
    v1, rollouts = labelled_v1
    passed_audit(team, v1)
    response = owner_api.post("/reverify", {"version": "counter2@1"})
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["status"], body["total"], body["replayed"], body["labelled"]) == ("queued", 6, 0, 0)
    assert outsider_api.get(f"/reverifications/{body['id']}").status_code == 404
    execute_reverification(body["id"])
    done = owner_api.get(f"/reverifications/{body['id']}").json()
    assert (done["status"], done["replayed"], done["labelled"]) == ("done", 6, 6)
    assert owner_api.post("/reverify", {"version": "counter2@1", "source": "nope@1"}).status_code == 404


def test_a_reverification_that_fails_midway_ends_failed_and_writes_no_label(team, owner, labelled_v1, monkeypatch):
    from runs.quality.replay import Replayer

    v1, _ = labelled_v1
    passed_audit(team, v1)
    job = services.reverification_start(version=v1, source=v1, actor=owner)
    real, calls = Replayer.replay, []

    def replay_then_break(self, rollout, **kwargs):
        calls.append(rollout.pk)
        if len(calls) > 3:
            raise RuntimeError("the database went away")
        return real(self, rollout, **kwargs)

    monkeypatch.setattr(Replayer, "replay", replay_then_break)
    before = RewardLabel.objects.count()
    assert execute_reverification(job.pk) == "failed"
    job.refresh_from_db()
    assert job.status == "failed" and job.labelled == 0 and job.finished_at is not None
    assert "the database went away" in job.message and "No label was written" in job.message
    assert RewardLabel.objects.count() == before


def test_a_reverification_taken_over_by_a_redelivery_writes_nothing_of_its_own(team, owner, labelled_v1, monkeypatch):
    v1, _ = labelled_v1
    passed_audit(team, v1)
    job = services.reverification_start(version=v1, source=v1, actor=owner)
    real = services.rollouts_reverify

    def redelivered_meanwhile(**kwargs):
        # The broker hands the job to another worker (this one presumed dead) while it replays.
        Reverification.objects.filter(pk=job.pk).update(attempts=F("attempts") + 1)
        return real(**kwargs)

    monkeypatch.setattr(services, "rollouts_reverify", redelivered_meanwhile)
    before = RewardLabel.objects.count()
    assert execute_reverification(job.pk) == "taken over"
    job.refresh_from_db()
    assert job.status == "running" and RewardLabel.objects.count() == before


def test_the_card_shows_a_reverification_and_polls_while_it_runs(team, owner, labelled_v1):
    v1, _ = labelled_v1
    passed_audit(team, v1)
    client = login(owner)
    card_url = reverse("quality:card", kwargs={"team": team.slug, "slug": "counter2", "number": 1})
    assert 'name="source"' in client.get(card_url).content.decode()
    response = client.post(reverse("quality:reverify", kwargs={"team": team.slug, "slug": "counter2", "number": 1}), {"source": "9"})
    assert response.status_code == 400 and not Reverification.objects.exists()
    assert "counter2 has no version 9." in response.content.decode()
    client.post(reverse("quality:reverify", kwargs={"team": team.slug, "slug": "counter2", "number": 1}), {"source": "1"})
    job = Reverification.objects.get()
    part_url = reverse("quality:reverification", kwargs={"team": team.slug, "reverification_id": job.pk})
    card = client.get(card_url).content.decode()
    assert 'data-reverification-status="queued"' in card and f'hx-get="{part_url}"' in card and "0 / 6 replayed" in card
    execute_reverification(job.pk)
    part = client.get(part_url).content.decode()
    assert 'data-reverification-status="done"' in part and "hx-get" not in part and "6 new verifier label(s)" in part


def test_api_starts_an_audit_refuses_a_second_and_hides_it_from_other_teams(team, owner, owner_api, outsider_api):
    package_version(team, owner, "apienv", COUNTER.replace("VERDICT", STRICT), max_steps=3)
    response = owner_api.post("/audits", {"version": "apienv@1", "seeds": "0"})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "running" and {run["name"] for run in body["runs"]} >= {"noop", "random", "claim", "peek", "determinism"}
    again = owner_api.post("/audits", {"version": "apienv@1", "seeds": "0"})
    assert again.status_code == 409 and "already running" in again.json()["detail"]
    assert owner_api.post("/audits", {"version": "apienv@1", "seeds": "x-y"}).status_code == 400
    assert owner_api.post("/audits", {"version": "nope@1"}).status_code == 404
    assert outsider_api.get(f"/audits/{body['id']}").status_code == 404
    assert outsider_api.post(f"/audits/{body['id']}/cancel").status_code == 404
    cancelled = owner_api.post(f"/audits/{body['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["report"] is None
    assert owner_api.get("/versions/apienv@1/audit").json()["id"] == body["id"]


def test_a_reviewer_cannot_start_an_audit(team, owner, reviewer):
    package_version(team, owner, "revenv", COUNTER.replace("VERDICT", STRICT), max_steps=3)
    response = api_for(reviewer, team).post("/audits", {"version": "revenv@1", "seeds": "0"})
    assert response.status_code == 403


def test_api_ab_compares_two_runs_and_says_what_is_wrong(team, owner, owner_api, labelled_v1):
    v1, rollouts = labelled_v1
    other = run_services.run_create(team=team, actor=owner, version=v1, agent=random_agent(team, owner), seeds=[10, 11], enqueue=False)
    play_run(other)
    response = owner_api.get(f"/quality/compare?runs={rollouts[0].run_id},{other.pk}")
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["a"]["n"] == 6 and result["b"]["n"] == 2 and result["p_value"] is not None
    assert owner_api.get("/quality/compare?runs=1").status_code == 400
    assert owner_api.get("/quality/compare?a=counter2@1").json()["field"] == "b"


def test_card_lines_are_escaped_and_link_to_their_rollouts(team, owner, labelled_v1):
    v1, rollouts = labelled_v1
    Audit.objects.create(team=team, environment_version=v1, status=AuditStatus.FLAGGED, seeds=[0], report={
        "status": "flagged", "probes": [], "oracle": None, "determinism": {},
        "lines": [{"check": "probe:claim", "level": "red", "rollout": rollouts[0].pk, "text": "<script>alert(1)</script> scores"}]})
    client = login(owner)
    page = client.get(reverse("quality:card", kwargs={"team": team.slug, "slug": "counter2", "number": 1})).content.decode()
    assert "&lt;script&gt;" in page and "<script>alert" not in page
    assert f"/t/{team.slug}/rollouts/{rollouts[0].pk}/" in page
    listing = client.get(reverse("environments:list", kwargs={"team": team.slug})).content.decode()
    assert 'data-audit-status="flagged"' in listing


def test_outsiders_see_no_card_and_no_audit_page(team, owner, outsider, labelled_v1):
    v1, _ = labelled_v1
    audit = Audit.objects.create(team=team, environment_version=v1, status=AuditStatus.PASSED, seeds=[0], report=None)
    client = login(outsider)
    assert client.get(reverse("quality:audit", kwargs={"team": team.slug, "audit_id": audit.pk})).status_code in (403, 404)
    assert client.get(reverse("quality:card", kwargs={"team": team.slug, "slug": "counter2", "number": 1})).status_code in (403, 404)


def test_ab_page_shows_the_difference_and_says_what_is_wrong(team, owner, labelled_v1):
    v1, rollouts = labelled_v1
    other = run_services.run_create(team=team, actor=owner, version=v1, agent=random_agent(team, owner), seeds=[10, 11], enqueue=False)
    play_run(other)
    client = login(owner)
    url = reverse("quality:compare", kwargs={"team": team.slug})
    page = client.get(url, {"runs": f"{rollouts[0].run_id},{other.pk}"}).content.decode()
    assert 'data-figure="mean_difference"' in page and 'data-figure="p_value"' in page and "<meter" in page
    refused = client.get(url, {"a": "counter2@1", "b": "counter2@1", "agent": "nobody"})
    assert refused.status_code == 200 and "No agent named" in refused.content.decode()
