"""A team's storage quota: the steps its rollouts stored count toward it, and a team over it gets no new
runs or versions (413 with the reason) while another team carries on."""
import secrets

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from environments import package
from runs.models import Rollout
from studio.storage_quota import MB, team_stored_bytes
from tests.runs.rollout_factories import package_version, play_one, random_agent

pytestmark = pytest.mark.django_db

BULKY_ENV = """
class Env:
    action_space = {"type": "discrete", "n": 2}

    def reset(self, task, seed):
        self.n = 0
        return {"text": "x" * 150_000}

    def step(self, action):
        self.n += 1
        return {"text": "y" * 150_000}, 1.0, self.n >= 4, False, {}
"""


def test_the_steps_a_rollout_stored_count_toward_its_teams_stored_bytes(team, owner, other_team):
    version = package_version(team, owner, "bulky", BULKY_ENV)
    before = team_stored_bytes(team_id=team.pk)
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.step_count == 4
    assert Rollout.objects.get(pk=rollout.pk).stored_bytes >= 500_000  # the reset and 4 steps of 150 KB
    assert team_stored_bytes(team_id=team.pk) - before >= 500_000
    assert team_stored_bytes(team_id=other_team.pk) == 0


def test_a_team_over_its_quota_gets_no_new_runs_or_versions_and_says_why(team, owner, owner_api, outsider_api, other_team,
                                                                          outsider, settings):
    version = package_version(team, owner, "bulky", BULKY_ENV)
    play_one(team, owner, version, random_agent(team, owner))
    package_version(other_team, outsider, "bulky", BULKY_ENV)
    settings.TEAM_STORAGE_QUOTA_MB = 1
    assert team_stored_bytes(team_id=team.pk) < 1 * MB  # one rollout: still under
    play_one(team, owner, version, random_agent(team, owner), seed=1)
    assert team_stored_bytes(team_id=team.pk) >= 1 * MB

    refused = owner_api.post("/runs", {"version": "bulky@1", "agent": "random", "seeds": "0-1"})
    assert refused.status_code == 413, refused.content
    assert "quota of 1 MB" in refused.json()["detail"] and "TEAM_STORAGE_QUOTA_MB" in refused.json()["detail"]
    archive = package.build_zip(version.files, "bulky")
    upload = owner_api.post("/packages", {"file": SimpleUploadedFile("bulky.zip", archive), "message": "again"},
                            content_type=None)
    assert upload.status_code == 413, upload.content
    assert "New version refused" in upload.json()["detail"]
    assert Rollout.objects.filter(team=team).count() == 2  # nothing half-made

    # Another team is not held back by this one's usage.
    accepted = outsider_api.post("/runs", {"version": "bulky@1", "agent": "random", "seeds": "0"})
    assert accepted.status_code == 201, accepted.content


def test_drafts_count_and_a_team_over_its_quota_cannot_grow_one_but_may_shrink_it(team, owner, owner_api, settings):
    package_version(team, owner, "bulky", BULKY_ENV)
    before = team_stored_bytes(team_id=team.pk)
    revision = owner_api.get("/environments/bulky/draft").json()["revision"]
    noise = secrets.token_hex(950_000)  # 1.9 MB that compresses little
    grown = owner_api.put("/environments/bulky/draft/files/data.txt", {"content": noise, "revision": revision})
    assert grown.status_code == 200, grown.content
    assert team_stored_bytes(team_id=team.pk) - before >= 1 * MB  # the draft counts, as stored

    settings.TEAM_STORAGE_QUOTA_MB = 1
    revision = grown.json()["revision"]
    refused = owner_api.put("/environments/bulky/draft/files/more.txt", {"content": "w" * 10_000, "revision": revision})
    assert refused.status_code == 413, refused.content
    assert "Saving the draft refused" in refused.json()["detail"]
    assert "more.txt" not in owner_api.get("/environments/bulky/draft").json()["files"]  # nothing half-written
    shrunk = owner_api.delete(f"/environments/bulky/draft/files/data.txt?revision={revision}")
    assert shrunk.status_code == 200, shrunk.content
