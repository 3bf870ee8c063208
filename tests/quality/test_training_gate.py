"""The training gate: with the team's gate on, a version whose latest audit is flagged is refused to
training (runs, remote episodes, exports: a 403 naming the version, nothing written) until a member
overrides it saying why; audits still run. With the gate off, nothing changes."""
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from runs import services as run_services
from runs.models import Run
from runs.quality.models import Audit, AuditStatus, GateOverride

from tests.conftest import api_for, login

pytestmark = pytest.mark.django_db


def flag(team, version, status=AuditStatus.FLAGGED):
    return Audit.objects.create(team=team, environment_version=version, status=status, seeds=[0],
                                report={"status": status, "lines": [], "determinism": {"pairs": 0, "divergent": []}})


@pytest.fixture
def flagged(make_version, team, owner):
    version = make_version("guess_number")
    random = run_services.agent_get_or_create(team=team, actor=owner, name="random", kind="random")
    earlier = run_services.run_create(team=team, actor=owner, version=version, agent=random, enqueue=False)
    audit = flag(team, version)
    return version, audit, earlier


def gate_on(owner, team):
    response = login(owner).post(reverse("training_gate", kwargs={"team": team.slug}), {"enabled": "on"})
    assert response.status_code == 302
    team.refresh_from_db()
    assert team.training_gate


def test_with_the_gate_off_a_flagged_version_still_trains(flagged, team, owner_api):
    version, _, earlier = flagged
    response = owner_api.post("/runs", json.dumps({"version": version.label, "agent": "random", "seeds": "0"}))
    assert response.status_code == 201, response.content
    assert owner_api.get(f"/runs/{earlier.pk}/export").status_code == 200
    assert owner_api.get(f"/versions/{version.label}/gate").json()["blocks"] is False


def test_the_gate_refuses_runs_episodes_and_exports_of_a_flagged_version_until_overridden(flagged, team, owner, owner_api):
    version, audit, earlier = flagged
    gate_on(owner, team)
    runs_before = Run.objects.count()
    refused = owner_api.post("/runs", json.dumps({"version": version.label, "agent": "random", "seeds": "0"}))
    assert refused.status_code == 403 and refused.json()["field"] == "version"
    assert f"{version.label} is flagged by its audit {audit.pk}" in refused.json()["detail"]
    assert Run.objects.count() == runs_before  # nothing written
    episode = owner_api.post("/sessions", {"version": version.label, "task_id": "t1"})
    assert episode.status_code == 403 and "training gate" in episode.json()["detail"]
    assert Run.objects.count() == runs_before
    export = owner_api.get(f"/runs/{earlier.pk}/export")
    assert export.status_code == 403 and "training gate" in export.json()["detail"]
    page = login(owner).get(reverse("review:export_run", kwargs={"team": team.slug, "run_id": earlier.pk}))
    assert page.status_code == 403 and "training gate" in page.content.decode()
    with pytest.raises(CommandError, match="training gate"):
        call_command("export_trajectories", run=earlier.pk, team=team.slug)
    # An audit is how a flagged version gets looked at: never gated.
    assert owner_api.post("/audits", {"version": version.label, "seeds": "0"}).status_code == 202
    Audit.objects.filter(status=AuditStatus.RUNNING).update(status=AuditStatus.CANCELLED)
    # The card says what the gate blocks; the versions list marks the version.
    card = login(owner).get(reverse("quality:card", kwargs={"team": team.slug, "slug": version.environment.slug, "number": version.number}))
    assert "Training gate: blocked." in card.content.decode() and 'name="reason"' in card.content.decode()
    versions = login(owner).get(reverse("environments:versions", kwargs={"team": team.slug, "slug": version.environment.slug}))
    assert 'class="badge gate-blocked"' in versions.content.decode()

    # An override without a reason is refused and records nothing; with one, who and why are kept.
    form = reverse("quality:gate_override", kwargs={"team": team.slug, "slug": version.environment.slug, "number": version.number})
    login(owner).post(form, {"reason": "  "})
    assert not GateOverride.objects.exists()
    assert owner_api.post(f"/versions/{version.label}/gate/override", {"reason": ""}).status_code == 400
    login(owner).post(form, {"reason": "<b>known</b> false positive: the claim probe hits a demo's literal"})
    override = GateOverride.objects.get()
    assert override.created_by == owner and override.audit == audit
    card = login(owner).get(reverse("quality:card", kwargs={"team": team.slug, "slug": version.environment.slug, "number": version.number})).content.decode()
    assert "Training gate overridden" in card and "&lt;b&gt;known&lt;/b&gt; false positive" in card and "<b>known" not in card
    state = owner_api.get(f"/versions/{version.label}/gate").json()
    assert state["blocks"] is False and state["override"]["by"] == owner.username
    assert owner_api.post("/runs", json.dumps({"version": version.label, "agent": "random", "seeds": "0"})).status_code == 201
    assert owner_api.get(f"/runs/{earlier.pk}/export").status_code == 200

    # A newer flagged audit needs a new override; a passed one lifts the gate.
    newer = flag(team, version)
    assert owner_api.get(f"/versions/{version.label}/gate").json() | {"override": None} == {
        "version": version.label, "enabled": True, "flagged": True, "audit": newer.pk, "blocks": True,
        "message": owner_api.get(f"/versions/{version.label}/gate").json()["message"], "override": None}
    flag(team, version, AuditStatus.PASSED)
    assert owner_api.get(f"/versions/{version.label}/gate").json()["blocks"] is False


def test_only_owners_turn_the_gate_and_only_runners_override(flagged, team, owner, author, viewer):
    version, _, _ = flagged
    assert login(author).post(reverse("training_gate", kwargs={"team": team.slug}), {"enabled": "on"}).status_code == 403
    assert api_for(author, team).put("/training-gate", {"enabled": True}).status_code == 403
    team.refresh_from_db()
    assert not team.training_gate
    assert api_for(owner, team).put("/training-gate", {"enabled": True}).json() == {"enabled": True}
    assert api_for(viewer, team).post(f"/versions/{version.label}/gate/override", {"reason": "x"}).status_code == 403
    assert api_for(author, team).post(f"/versions/{version.label}/gate/override", {"reason": "reviewed by hand"}).status_code == 201
    settings_page = login(viewer).get(reverse("team_settings", kwargs={"team": team.slug})).content.decode()
    assert "<strong>On:</strong>" in settings_page and 'name="enabled"' not in settings_page
