"""Remote episodes through one credential and version group into one session run (runs.episodes.interactive
.session_run_for): a new one after an idle gap, or when the client names a run; the run is running while
an episode is open and finished when the last one ends."""
import pytest

from runs.models import Rollout, Run, RunPurpose, RunStatus
from tests.processes import episode_host, episode_host_prefix  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("episode_host")]


def start(api, **extra):
    response = api.post("/sessions", {"version": "inventory-tools@1", "task_id": "q1", "seed": 0, **extra})
    assert response.status_code == 201, response.content
    return response.json()


def close(api, opened):
    assert api.post(f"/sessions/{opened['session_id']}/close").status_code == 200


def test_two_episodes_through_one_token_are_one_session_run(owner_api, inventory):
    first = start(owner_api)
    second = start(owner_api, task_id="q2", seed=7)
    assert first["run_id"] == second["run_id"]
    run = Run.objects.get(pk=first["run_id"])
    assert run.purpose == RunPurpose.SESSION and run.status == RunStatus.RUNNING
    assert run.task_ids == ["q1", "q2"] and run.seeds == [0, 7]
    close(owner_api, first)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # one episode still open
    close(owner_api, second)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED and run.finished_at is not None
    # A third episode soon after joins the same run, which runs again until it ends.
    third = start(owner_api)
    assert third["run_id"] == run.pk
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.finished_at is None
    close(owner_api, third)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED
    assert Rollout.objects.filter(run=run).count() == 3
    listed = owner_api.get("/runs", {"purpose": "session"}).json()
    assert [r["id"] for r in listed] == [run.pk] and listed[0]["purpose"] == "session"
    assert listed[0]["summary"]["total"] == 3
    assert owner_api.get("/runs").json() == []  # evaluations by default


def test_after_an_idle_gap_a_new_session_run_begins(owner_api, inventory, settings):
    settings.SESSION_RUN_IDLE_S = 0
    first = start(owner_api)
    close(owner_api, first)
    second = start(owner_api)
    assert second["run_id"] != first["run_id"]
    close(owner_api, second)


def test_a_named_run_groups_its_episodes_apart(owner_api, inventory, settings):
    plain = start(owner_api)
    named = start(owner_api, run_name="lr-3e-4")
    assert named["run_id"] != plain["run_id"]
    close(owner_api, named)
    settings.SESSION_RUN_IDLE_S = 0  # a named run is joined whatever the gap
    again = start(owner_api, run_name="lr-3e-4")
    assert again["run_id"] == named["run_id"]
    for opened in (plain, again):
        close(owner_api, opened)


def test_another_token_is_another_session_run(owner_api, owner, team, inventory):
    from tests.conftest import api_for

    other_api = api_for(owner, team)
    mine = start(owner_api)
    theirs = start(other_api)
    assert mine["run_id"] != theirs["run_id"]
    close(owner_api, mine)
    close(other_api, theirs)


def test_a_bad_run_name_is_refused_naming_the_field(owner_api, inventory):
    response = owner_api.post("/sessions", {"version": "inventory-tools@1", "task_id": "q1", "run_name": "a/b"})
    assert response.status_code == 422 and response.json()["field"] == "run_name"
    assert not Rollout.objects.exists()
