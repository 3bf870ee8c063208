"""run_rollouts and export_trajectories, as a user types them."""
import io
import json

import pytest
from django.core.management import CommandError, call_command

from runs import services
from runs.models import LabelDecision, LabelSource, RewardLabel, Run
from runs.management.commands.run_rollouts import parse_seeds

from rollout_factories import DEMO_DIR, demo_version

pytestmark = pytest.mark.django_db


def run_command(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_seed_ranges_and_lists():
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("1,5,7-8") == [1, 5, 7, 8]
    with pytest.raises(CommandError):
        parse_seeds("a-b")


def test_run_rollouts_inline_prints_run_id_and_json_summary(team, owner):
    version = demo_version(team, owner, "guess_number")
    agent_path = DEMO_DIR / "guess_number" / "agent.py"
    out = run_command("run_rollouts", version.label, "--team", team.slug, "--agent", str(agent_path),
                      "--tasks", "t1,t2", "--seeds", "0-2", "--inline")
    run_id, _, summary_text = out.partition("\n")
    run = Run.objects.get(pk=int(run_id))
    summary = json.loads(summary_text)
    assert summary["run_id"] == run.pk and summary["total"] == 6 and summary["done"] == 6
    assert summary["counts"]["succeeded"] == 6 and summary["success_rate"] == 1.0
    assert run.agent.name == "agent" and run.agent.kind == "scripted"


def test_run_rollouts_reuses_the_random_agent_and_refuses_unknown_tasks(team, owner):
    version = demo_version(team, owner, "guess_number")
    run_command("run_rollouts", version.label, "--team", team.slug, "--agent", "random", "--seeds", "0")
    run_command("run_rollouts", version.label, "--team", team.slug, "--agent", "random", "--seeds", "1")
    assert set(Run.objects.values_list("agent__name", flat=True)) == {"random"}
    with pytest.raises(CommandError, match="nope"):
        run_command("run_rollouts", version.label, "--team", team.slug, "--agent", "random", "--tasks", "nope")


def test_export_trajectories_writes_one_parseable_line_per_rollout(team, owner):
    version = demo_version(team, owner, "guess_number")
    out = run_command("run_rollouts", version.label, "--team", team.slug, "--agent",
                      str(DEMO_DIR / "guess_number" / "agent.py"), "--tasks", "t1,t3", "--seeds", "0,1", "--inline")
    run = Run.objects.get(pk=int(out.split("\n")[0]))
    lines = [json.loads(line) for line in run_command("export_trajectories", "--run", str(run.pk)).splitlines()]
    assert len(lines) == 4
    first = lines[0]
    assert (first["environment"], first["version"], first["content_hash"]) == ("guess-number", version.label, version.content_hash)
    assert first["agent"]["kind"] == "scripted" and first["verifier_reward"] == 1.0
    assert first["label"] == {"value": 1.0, "decision": "proposed", "source": "verifier"}
    rollout = run.rollouts.get(pk=first["rollout_id"])
    assert len(first["steps"]) == rollout.step_count and [s["index"] for s in first["steps"]] == list(range(rollout.step_count))
    assert set(first["steps"][0]) == {"index", "action", "observation", "reward", "terminated", "truncated", "info"}

    approved = run.rollouts.order_by("id").first()
    RewardLabel.objects.create(team=team, rollout=approved, source=LabelSource.HUMAN, value=1.0,
                               decision=LabelDecision.APPROVED, reviewer=owner)
    only = run_command("export_trajectories", "--run", str(run.pk), "--approved-only").splitlines()
    assert [json.loads(line)["rollout_id"] for line in only] == [approved.pk]


def test_export_refuses_a_run_of_another_team(team, owner, other_team):
    version = demo_version(team, owner, "guess_number")
    run = services.run_create(team=team, actor=owner, version=version,
                              agent=services.agent_create(team=team, actor=owner, name="r", kind="random"), seeds=[0], enqueue=False)
    with pytest.raises(CommandError, match="No run"):
        run_command("export_trajectories", "--run", str(run.pk), "--team", other_team.slug)
