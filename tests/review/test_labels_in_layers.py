"""Labels in layers (issue 26.1): eight rollouts reviewed (6 approved, 1 rejected, 1 overridden to 0.5), then
re-verified with v2's verifier through the card's confirm page and the worker's task. The human decisions stay
the current labels: the export, the agreement panel, /runs/{id}/agreement and the queue agree before and after,
and the rollouts a newer verifier judges otherwise are marked disagreement (counted, filtered, decided again)."""
import json

import pytest
from django.urls import reverse

from environments import services as env_services
from runs.models import LabelDecision, LabelSource, RewardLabel
from runs.quality.models import Reverification
from runs.quality.selectors import reverification_preview
from runs.quality.tasks import execute_reverification
from runs.review import selectors, services
from runs import services as run_services
from tests.conftest import login
from tests.quality.audits import passed_audit
from tests.runs.rollout_factories import package_version, play_run, random_agent

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
def reviewed(team, owner):
    """layers@1 (strict verifier), 8 rollouts: 6 approved, 1 rejected (a pass), 1 overridden to 0.5; and
    layers@2, whose lenient verifier passes everything."""
    v1 = package_version(team, owner, "layers", COUNTER.replace("VERDICT", STRICT), max_steps=5)
    run = run_services.run_create(team=team, actor=owner, version=v1, agent=random_agent(team, owner),
                                  seeds=list(range(8)), enqueue=False)
    rollouts = play_run(run)
    passing = [r for r in rollouts if r.verifier_reward > 0]
    assert passing and len(passing) < 8, "the seeds should give passes and failures"
    rejected, overridden = passing[0], next(r for r in rollouts if r is not passing[0])
    for rollout in rollouts:
        if rollout is rejected:
            services.label_decide(rollout=rollout, actor=owner, decision=LabelDecision.REJECTED, rationale="not solved")
        elif rollout is overridden:
            services.label_decide(rollout=rollout, actor=owner, decision=LabelDecision.OVERRIDDEN, value=0.5,
                                  rationale="half done")
        else:
            services.label_decide(rollout=rollout, actor=owner, decision=LabelDecision.APPROVED)
    v2 = env_services.version_commit(environment=v1.environment, actor=owner, message="lenient",
                                     files={**v1.files, "env.py": COUNTER.replace("VERDICT", LENIENT)})
    passed_audit(team, v2)
    # v2 passes every rollout: it contradicts the approved failures and the rejected pass, not the 0.5 override.
    contradicted = {r.pk for r in rollouts if r is rejected or (r is not overridden and r.verifier_reward == 0)}
    return run, rollouts, v1, v2, contradicted


def _export_rows(client, url) -> list[dict]:
    response = client.get(url)
    if response.get("Content-Type", "").startswith("text/html"):
        assert "0 rollouts match" in response.content.decode()
        return []
    rows = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert int(response["X-Export-Count"]) == len(rows)
    return rows


def _what_users_see(team, owner, owner_api, run) -> dict:
    """The figures a user meets on the pages and the API, each read its own way."""
    client = login(owner)
    page_rows = _export_rows(client, reverse("review:export_run", kwargs={"team": team.slug, "run_id": run.pk}))
    api_rows = _export_rows(owner_api, f"/runs/{run.pk}/export")
    agreement = owner_api.get(f"/runs/{run.pk}/agreement").json()
    run_page = client.get(reverse("runs:run", kwargs={"team": team.slug, "run_id": run.pk})).content.decode()
    queue = owner_api.get("/review/queue", {"run": run.pk}).json()
    disagreeing = owner_api.get("/review/queue", {"run": run.pk, "disagreement": "true"}).json()
    queue_page = client.get(reverse("review:queue", kwargs={"team": team.slug}), {"run": run.pk, "disagreement": "1"})
    return {
        "export_page": sorted((row["rollout_id"], row["label"]["value"], row["label"]["source"]) for row in page_rows),
        "export_api": sorted((row["rollout_id"], row["label"]["value"], row["label"]["source"]) for row in api_rows),
        "decided": (agreement["approved"], agreement["rejected"], agreement["overridden"]),
        "agreement_api": agreement, "agreement": selectors.agreement(run=run),
        "run_page": run_page, "queue": queue["count"],
        "disagreeing": sorted(item["id"] for item in disagreeing["items"]), "disagreeing_count": disagreeing["count"],
        "queue_page": queue_page.content.decode(),
    }


def test_a_reverification_keeps_the_human_labels_current_and_every_figure_agrees(team, owner, owner_api, reviewed):
    run, rollouts, v1, v2, contradicted = reviewed
    before = _what_users_see(team, owner, owner_api, run)
    assert len(before["export_page"]) == 7 and before["export_page"] == before["export_api"]
    assert before["decided"] == (6, 1, 1) and before["agreement_api"]["disagreements"] == 0
    assert before["agreement_api"] == json.loads(json.dumps(before["agreement"]))
    assert before["queue"] == 0 and before["disagreeing"] == []
    labels_before = RewardLabel.objects.count()

    # The card's Re-verify opens the confirm page, which says what would change before anything is queued.
    client = login(owner)
    confirm = client.get(reverse("quality:reverify_confirm", kwargs={"team": team.slug, "slug": "layers", "number": 2}),
                         {"source": "1"})
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "8 labels would change, 8 of them human-decided; those stay." in page
    assert "change no current label" in page and "Upper bounds" in page
    assert not Reverification.objects.exists()
    preview = owner_api.get("/reverify/preview", {"version": "layers@2", "source": "layers@1"}).json()
    assert (preview["labels_may_change"], preview["human_decided"], preview["current_may_change"]) == (8, 8, 0)
    assert preview["summary"] == "8 labels would change, 8 of them human-decided; those stay."

    client.post(reverse("quality:reverify", kwargs={"team": team.slug, "slug": "layers", "number": 2}), {"source": "1"})
    job = Reverification.objects.get()
    assert execute_reverification(job.pk) == "done"
    assert RewardLabel.objects.count() == labels_before + 8  # new labels beside the old ones; nothing deleted
    assert set(RewardLabel.objects.filter(rationale__startswith="re-verified by layers@2").values_list(
        "verifier_version_id", flat=True)) == {v2.pk}

    after = _what_users_see(team, owner, owner_api, run)
    assert after["export_page"] == before["export_page"] == after["export_api"]  # the same 7 human labels
    assert {source for _, _, source in after["export_page"]} == {LabelSource.HUMAN}
    assert after["decided"] == (6, 1, 1) and after["queue"] == 0
    assert after["agreement_api"] == json.loads(json.dumps(after["agreement"]))
    # v1's verifier is still the one the humans are compared with; v2's own row says where it disagrees.
    assert after["agreement_api"]["verifier_human"] == before["agreement_api"]["verifier_human"]
    assert after["agreement_api"]["disagreements"] == len(contradicted)
    by_verifier = {row["version"]: row for row in after["agreement_api"]["by_verifier"]}
    assert by_verifier["layers@1"]["own"] and by_verifier["layers@1"]["disagreements"] == 0
    assert (by_verifier["layers@2"]["labelled"], by_verifier["layers@2"]["compared"],
            by_verifier["layers@2"]["disagreements"]) == (8, 8, len(contradicted))
    assert by_verifier["layers@2"]["agreeing"] == 8 - len(contradicted)
    # The queue offers the contradicted rollouts again under the disagreement filter, page and API alike.
    assert after["disagreeing"] == sorted(contradicted) and after["disagreeing_count"] == len(contradicted)
    for rollout_id in contradicted:
        assert f"#{rollout_id}</a>" in after["queue_page"]
    assert after["queue_page"].count('class="badge failed disagreement"') == len(contradicted)
    assert f'{len(contradicted)}</a></div><div class="muted small">in disagreement' in after["run_page"]
    version_page = client.get(reverse("environments:version", kwargs={"team": team.slug, "slug": "layers", "number": 1}))
    assert f'{len(contradicted)}</a></div><div class="muted small">in disagreement' in version_page.content.decode()

    # The review screen shows the human label as current; deciding again settles the disagreement.
    settled = sorted(contradicted)[0]
    item = client.get(reverse("review:item", kwargs={"team": team.slug, "rollout_id": settled})).content.decode()
    assert 'id="disagreement-note"' in item and '<span class="badge">current</span>' in item
    history = owner_api.get(f"/rollouts/{settled}/labels").json()
    assert history["disagreement"] and history["current"]["source"] == LabelSource.HUMAN
    assert history["history"][-1]["verifier_version_id"] == v2.pk
    owner_api.post(f"/rollouts/{settled}/labels", {"decision": "overridden", "value": 1.0, "rationale": "v2 is right"})
    settled_after = _what_users_see(team, owner, owner_api, run)
    assert settled_after["disagreeing"] == sorted(contradicted - {settled})
    assert settled_after["agreement_api"]["disagreements"] == len(contradicted) - 1
    assert (settled, 1.0, LabelSource.HUMAN) in settled_after["export_api"]


def test_a_reverification_by_the_runs_own_version_changes_only_undecided_current_labels(team, owner, owner_api, make_run):
    run = make_run(rewards=(1.0, 0.0, 1.0))
    decided, undecided, _ = run.rollouts.order_by("id")
    services.label_decide(rollout=decided, actor=owner, decision=LabelDecision.APPROVED)
    version = run.environment_version
    preview = reverification_preview(version=version, source=version)
    assert (preview["labels_may_change"], preview["human_decided"], preview["current_may_change"]) == (3, 1, 2)
    for rollout in (decided, undecided):  # what the worker writes: the run's own verifier, scoring otherwise
        RewardLabel.objects.create(team=team, rollout=rollout, source=LabelSource.VERIFIER, value=0.0 if rollout == decided else 1.0,
                                   decision=LabelDecision.PROPOSED, verifier_version=version, rationale="re-verified")
    rows = {row["rollout_id"]: row["label"] for row in map(json.loads, b"".join(
        owner_api.get(f"/runs/{run.pk}/export?decision=all").streaming_content).decode().splitlines())}
    assert rows[decided.pk] == {"value": 1.0, "decision": "approved", "source": "human"}
    assert rows[undecided.pk] == {"value": 1.0, "decision": "proposed", "source": "verifier"}
    assert selectors.agreement(run=run)["disagreements"] == 1
    assert [r.pk for r in selectors.review_queue_page(team=team, reviewer=owner, filters=selectors.QueueFilters(
        disagreement=True))] == [decided.pk]
