"""A version's own agent (its `[quality] oracle`, else agent.py) runs like any scripted agent, chosen
by the API (`"agent": "version"`) and run_rollouts (`--agent version`); New run's choice is in
tests/browser/test_version_agent.py."""
import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from environments import services as env_services
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


def test_the_worked_example_of_docs_agents_md_runs_as_it_says(team, owner, owner_api):
    """docs/agents.md's Lift package, taken from the page's own code blocks."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()
    blocks = {block.splitlines()[0]: block for block in re.findall(r"```(?:toml|python)\n(.*?)```", text, re.S)}
    files = {"environment.toml": blocks["# environment.toml"], "env.py": blocks[next(k for k in blocks if k.startswith("# env.py"))],
             "agent.py": blocks[next(k for k in blocks if k.startswith("# agent.py"))],
             "tasks.jsonl": '{"id": "f3", "difficulty": 1, "floor": 3}\n'}
    env = env_services.environment_create(team=team, actor=owner, name="Lift", slug="lift", files=files)
    env_services.version_commit(environment=env, actor=owner, message="docs", files=files)
    r = owner_api.post("/runs", {"version": "lift@1", "agent": "version"})
    assert r.status_code == 201, r.json()
    (rollout,) = play_run(Run.objects.get(pk=r.json()["id"]))
    assert (rollout.status, rollout.step_count) == ("succeeded", 4), rollout.error
    assert list(rollout.steps.order_by("index").values_list("action", flat=True)) == [1, 1, 1, 0]
    assert rollout.reproduction["action_names"] == {"0": "OPEN", "1": "UP", "2": "DOWN"}
