"""A version's own agent (its `[quality] oracle`, else agent.py) runs like any scripted agent, chosen
by the API (`"agent": "version"`) and run_rollouts (`--agent version`); New run's choice is in
tests/browser/test_version_agent.py."""
import io
import json

import pytest
from django.core.management import CommandError, call_command

from runs.models import Run

from rollout_factories import DEMO_DIR, IDLE_ENV_PY, demo_version, package_version, play_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_api_runs_the_versions_own_agent_in_an_agent_sandbox(team, owner, owner_api):
    version = demo_version(team, owner, "guess_number")
    r = owner_api.post("/runs", {"version": version.label, "agent": "version", "task_ids": ["t1", "t3"], "seeds": "0-1"})
    assert r.status_code == 201, r.json()
    body = r.json()
    # [quality] oracle = "agent.py": the audit's oracle and this are one agent, with the file's code.
    assert body["agent"] == "guess-number-oracle"
    run = Run.objects.select_related("agent").get(pk=body["id"])
    assert run.agent.kind == "scripted" and run.agent.code == (DEMO_DIR / "guess_number" / "agent.py").read_text()
    rollouts = play_run(run)
    assert [rollout.status for rollout in rollouts] == ["succeeded"] * 4, [rollout.error for rollout in rollouts]
    # It ran in an agent sandbox of its own, as untrusted code does, not in the worker.
    assert all(rollout.reproduction["agent_sandbox"]["mode"] == "agent" for rollout in rollouts)
    assert owner_api.get(f"/runs/{run.pk}").json()["summary"]["success_rate"] == 1.0
    # The same code again is the same agent, not a new one per run.
    again = owner_api.post("/runs", {"version": version.label, "agent": "version", "task_ids": ["t1"], "seeds": "0"})
    assert again.json()["agent_id"] == body["agent_id"]


def test_a_version_that_ships_no_agent_is_refused_naming_the_agent_field(team, owner, owner_api):
    version = package_version(team, owner, "no-agent", IDLE_ENV_PY)
    r = owner_api.post("/runs", {"version": version.label, "agent": "version"})
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "agent" and "no-agent@1 ships no agent" in r.json()["detail"]
    assert not Run.objects.exists()


def test_run_rollouts_runs_the_versions_own_agent(team, owner):
    version = demo_version(team, owner, "guess_number")
    out = io.StringIO()
    call_command("run_rollouts", version.label, "--team", team.slug, "--agent", "version", "--tasks", "t2",
                 "--seeds", "0-1", "--inline", stdout=out)
    run_id, _, summary_text = out.getvalue().partition("\n")
    summary = json.loads(summary_text)
    assert summary["counts"]["succeeded"] == 2 and summary["success_rate"] == 1.0
    assert Run.objects.get(pk=int(run_id)).agent.name == "guess-number-oracle"
    bare = package_version(team, owner, "bare", IDLE_ENV_PY)
    with pytest.raises(CommandError, match="bare@1 ships no agent"):
        call_command("run_rollouts", bare.label, "--team", team.slug, "--agent", "version", stdout=io.StringIO())
