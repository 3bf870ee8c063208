"""The checks that replay an audit's stored episodes: a verifier that disagrees with itself (red on
`verifier.consistency` alone, and re-verification by it is refused on every edge), and episodes that change
under another hash seed or time zone (amber on `portability` alone). The clean controls stay green on both.
Rollouts run in this process (the Celery task bodies); the replays in sandboxes as audit_complete plays them."""
import time

import pytest
from django.urls import reverse

from runs.quality import consistency, services
from runs.quality.models import Reverification
from runs.sandbox import SandboxConfig
from runs.sandbox.backends import sandbox_for

from tests.conftest import login
from tests.quality.audits import play_audit
from tests.quality.test_judgement import line_of, not_green

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_verifier_that_rolls_dice_is_red_on_consistency_alone_with_each_instance_and_its_verdicts(make_version, owner):
    version = make_version("quiz_dice_verifier")
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "flagged" and not_green(audit) == {"verifier.consistency"}, audit.report["lines"]
    found = audit.report["consistency"]
    # The oracle's 4 instances (always 1.0) and the random probe's 4 (partial credit drawn per call).
    assert found["applies"] and found["calls"] == 5 and found["instances"] == 8 and found["errors"] == []
    assert {(entry["task_id"], entry["seed"], entry["source"]) for entry in found["inconsistent"]} == {
        (task, seed, "random") for task in ("add", "mul") for seed in (0, 1)}
    assert all(len(entry["verdicts"]) > 1 and max(entry["verdicts"]) <= 0.02 for entry in found["inconsistent"])
    line = line_of(audit, "verifier.consistency")
    first = found["inconsistent"][0]
    assert "disagrees with itself on 4 of 8 replayed instances" in line["text"]
    assert f"task {first['task_id']} seed {first['seed']} (random): " in line["text"] and line["rollout"] == first["rollout"]
    # Determinism pairs compare steps: they repeat. No probe is rewarded by credit this small.
    assert audit.report["determinism"]["divergent"] == [] and not any(probe["flagged"] for probe in audit.report["probes"])
    page = login(owner).get(reverse("quality:audit", kwargs={"team": version.environment.team.slug, "audit_id": audit.pk})).content.decode()
    assert '<section class="card" id="verifier-consistency"><h3>Verifier consistency</h3>' in page
    assert f'<td><code>{first["task_id"]}</code></td><td>{first["seed"]}</td><td>random</td>' in page


def test_reverification_by_a_verifier_that_disagrees_with_itself_is_refused_by_service_api_and_pages(make_version, owner, owner_api, team):
    version = make_version("quiz_dice_verifier")
    play_audit(services.audit_start(version=version, actor=owner, seeds=[0]))
    with pytest.raises(services.InvalidAudit, match="disagrees with itself"):
        services.reverification_start(version=version, source=version, actor=owner)
    response = owner_api.post("/reverify", {"version": version.label})
    assert response.status_code == 400 and response.json()["field"] == "version"
    assert "disagrees with itself" in response.json()["detail"] and "task add seed 0" in response.json()["detail"]
    assert owner_api.get("/reverify/preview", {"version": version.label}).status_code == 400
    assert not Reverification.objects.exists()
    client = login(owner)
    kwargs = {"team": team.slug, "slug": version.environment.slug, "number": version.number}
    card = client.get(reverse("quality:card", kwargs=kwargs)).content.decode()
    assert 'id="reverify-refused"' in card and "disagrees with itself" in card and "Re-verify…" not in card
    confirm = client.get(reverse("quality:reverify_confirm", kwargs=kwargs), follow=True)
    assert "disagrees with itself" in confirm.content.decode()
    started = client.post(reverse("quality:reverify", kwargs=kwargs), follow=True)
    assert "disagrees with itself" in started.content.decode() and not Reverification.objects.exists()


@pytest.mark.parametrize("package, convention, reason", [
    ("quiz_hash_order", "hash order", "the reset observation differs"),
    ("quiz_local_time", "time zone", "step 0's observation differs"),
])
def test_an_episode_that_changes_outside_the_studio_is_amber_not_portable_alone(make_version, owner, package, convention, reason):
    version = make_version(package)
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert audit.status == "warnings" and not_green(audit) == {"portability"}, audit.report["lines"]
    assert audit.report["determinism"]["divergent"] == []  # the studio's own conventions repeat it
    found = {entry["name"]: entry for entry in audit.report["portability"]["conventions"]}
    assert audit.report["portability"]["instances"] == 4
    assert [(entry["task_id"], entry["seed"], entry["first_divergent_step"], entry["reason"]) for entry in found[convention]["divergent"]] == [
        (task, seed, 0, reason) for task in ("add", "mul") for seed in (0, 1)]
    other = next(name for name in found if name != convention)
    assert found[other]["divergent"] == [] and found[other]["errors"] == []
    line = line_of(audit, "portability", "amber")
    assert line["text"].startswith(f"Not portable: depends on {convention}.") and "4 of 4 episodes diverge" in line["text"]
    assert f"at step 0 ({reason})" in line["text"] and line["rollout"] is not None
    page = login(owner).get(reverse("quality:audit", kwargs={"team": version.environment.team.slug, "audit_id": audit.pk})).content.decode()
    assert '<h3>Portability</h3>' in page and f"at step 0 ({reason.replace(chr(39), '&#x27;')})" in page


@pytest.mark.parametrize("package", ["arithmetic_quiz", "sorting"])
def test_the_clean_controls_are_green_on_consistency_and_portability_and_the_checks_stay_cheap(make_version, owner, package):
    version = make_version(package)
    audit = play_audit(services.audit_start(version=version, actor=owner, seeds=[0, 1]))
    assert not_green(audit) == set(), audit.report["lines"]
    assert audit.report["consistency"]["instances"] == 8 and audit.report["consistency"]["inconsistent"] == []
    assert audit.report["portability"]["instances"] == 4
    assert [entry["replayed"] for entry in audit.report["portability"]["conventions"]] == [4, 4]
    assert {check["id"] for check in audit.report["checks"]} >= {"verifier.consistency", "portability"}
    started = time.monotonic()
    consistency.replay_checks(audit=audit)
    assert time.monotonic() - started < 10  # three sandboxes and 16 short replays: ~1 s on the shared cores


def test_the_sandbox_takes_another_hash_seed_and_time_zone_and_keeps_the_studios_by_default():
    files = {"env.py": (
        "import os, time\n\n\nclass Env:\n"
        "    def reset(self, task, seed):\n"
        "        return {'hash': os.environ.get('PYTHONHASHSEED'), 'tz': os.environ.get('TZ'),\n"
        "                'order': list({'carry', 'digits', 'order', 'sign', 'tens', 'units'}),\n"
        "                'local': time.strftime('%H:%M', time.localtime(1700000000))}\n"
    )}
    seen = []
    for config in (SandboxConfig(), SandboxConfig(hash_seed=consistency.OTHER_HASH_SEED, timezone=consistency.CHATHAM)):
        with sandbox_for("process", config) as sandbox:
            sandbox.start(files, entrypoint="env:Env")
            seen.append(sandbox.reset({"id": "t"}, seed=0))
    studio, other = seen
    assert (studio["hash"], studio["tz"], studio["local"]) == ("0", "UTC", "22:13")
    assert (other["hash"], other["local"]) == ("1", "11:58") and other["order"] != studio["order"]
