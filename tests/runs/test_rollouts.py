"""Rollouts end to end in this process: agents, runs, the episode loop, labels, reruns, summaries."""
import pytest

from runs import selectors, services
from runs.models import LabelDecision, LabelSource, RolloutStatus, RunStatus, Step
from runs.figures import run_figures
from studio.errors import DomainError

from rollout_factories import demo_agent_code, demo_version, package_version, play_one, play_run, random_agent, scripted_agent

pytestmark = pytest.mark.django_db


# -- agents ---------------------------------------------------------------------------------------


def test_scripted_agent_needs_code_with_act(team, owner):
    with pytest.raises(DomainError, match="act") as caught:
        services.agent_create(team=team, actor=owner, name="lazy", kind="scripted", code="x = 1\n")
    assert caught.value.field == "code"
    with pytest.raises(DomainError, match="line 1"):
        services.agent_create(team=team, actor=owner, name="broken", kind="scripted", code="def act(:\n")


def test_agent_records_the_sha256_of_its_code(team, owner):
    agent = services.agent_create(team=team, actor=owner, name="a", kind="scripted", code="def act(o, i):\n    return 1\n")
    import hashlib

    assert agent.code_hash == hashlib.sha256(agent.code.encode()).hexdigest()
    assert services.agent_create(team=team, actor=owner, name="r", kind="random").code == ""


# -- run creation ---------------------------------------------------------------------------------


def test_run_creates_one_rollout_per_task_seed_and_repeat(team, owner):
    version = demo_version(team, owner, "guess_number")
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                              task_ids=["t1", "t2"], seeds=[0, 1, 2], repeats=2)
    assert run.rollouts.count() == 12
    assert sorted(set(run.rollouts.values_list("task_id", flat=True))) == ["t1", "t2"]
    assert run.status == RunStatus.QUEUED


def test_run_refuses_unknown_task_ids_naming_them(team, owner):
    version = demo_version(team, owner, "guess_number")
    with pytest.raises(DomainError, match="nope, t99") as caught:
        services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                            task_ids=["t1", "nope", "t99"], seeds=[0])
    assert caught.value.field == "task_ids"


@pytest.mark.parametrize(
    "kwargs, field",
    [({"seeds": []}, "seeds"), ({"seeds": list(range(5000)), "repeats": 3}, "seeds"), ({"repeats": 0}, "repeats"),
     ({"limits": {"step_timeout_s": -1}}, "limits.step_timeout_s"), ({"difficulties": [9]}, "difficulties")],
)
def test_run_refuses_bad_selections(team, owner, kwargs, field):
    version = demo_version(team, owner, "guess_number")
    with pytest.raises(DomainError) as caught:
        services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                            **({"seeds": [0]} | kwargs))
    assert caught.value.field == field


def test_run_selects_tasks_by_difficulty(team, owner):
    version = demo_version(team, owner, "guess_number")
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                              difficulties=[2], seeds=[0])
    assert run.task_ids == ["t3", "t4"]


def test_run_refuses_another_teams_version(team, owner, other_team, outsider):
    version = demo_version(other_team, outsider, "guess_number")
    with pytest.raises(DomainError, match="another team"):
        services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0])


def test_rollouts_are_enqueued_only_after_commit(team, owner, django_capture_on_commit_callbacks):
    version = demo_version(team, owner, "guess_number")
    with django_capture_on_commit_callbacks() as callbacks:
        services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1])
    assert len(callbacks) == 1  # one callback sends every rollout of the run


# -- the demo packages ----------------------------------------------------------------------------


def test_guess_number_scripted_agent_succeeds_with_reward_one(team, owner):
    version = demo_version(team, owner, "guess_number")
    agent = scripted_agent(team, owner, demo_agent_code("guess_number"))
    rollout = play_one(team, owner, version, agent, task_id="t3", seed=4)
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.verifier_reward == 1.0 and "guessed" in rollout.verifier_reason
    assert rollout.end_reason == "terminated"
    assert rollout.initial_observation == "Guess a whole number between 1 and 100."
    steps = list(rollout.steps.all())
    assert [step.index for step in steps] == list(range(rollout.step_count))
    assert steps[-1].terminated and steps[-1].observation.endswith("is correct")
    label = rollout.labels.get()
    assert (label.source, label.decision, label.value) == (LabelSource.VERIFIER, LabelDecision.PROPOSED, 1.0)


def test_reproduction_names_version_task_seed_agent_and_sandbox(team, owner):
    version = demo_version(team, owner, "guess_number")
    agent = scripted_agent(team, owner, demo_agent_code("guess_number"))
    repro = play_one(team, owner, version, agent, seed=3).reproduction
    assert repro["version"] == version.label and repro["content_hash"] == version.content_hash
    assert (repro["task_id"], repro["seed"]) == ("t1", 3)
    assert repro["agent"] == {"name": "scripted", "kind": "scripted", "code_hash": agent.code_hash, "config": {}}
    assert repro["sandbox"]["backend"] == "process" and repro["sandbox"]["python"].startswith("3.")
    assert "network_isolated" in repro["sandbox"] and repro["sandbox"]["limits"]["memory_mb"] == 256
    assert repro["agent_sandbox"]["mode"] == "agent"


def test_inventory_tools_scripted_agent_succeeds(team, owner):
    version = demo_version(team, owner, "inventory_tools")
    agent = scripted_agent(team, owner, demo_agent_code("inventory_tools"))
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids="all", seeds=[0])
    rollouts = play_run(run)
    assert [r.status for r in rollouts] == [RolloutStatus.SUCCEEDED] * 5, [r.error for r in rollouts]
    assert all(r.verifier_reward == 1.0 for r in rollouts)


def test_frozen_lake_random_agent_stores_steps_and_reruns_identically(team, owner):
    version = demo_version(team, owner, "frozen_lake")
    rollout = play_one(team, owner, version, random_agent(team, owner), task_id="8x8", seed=7)
    assert rollout.status in (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED), rollout.error
    assert rollout.step_count > 0 and rollout.steps.count() == rollout.step_count
    assert all(step.action in (0, 1, 2, 3) for step in rollout.steps.all())

    rerun = services.rollout_rerun(rollout=rollout, actor=owner)
    from runs.tasks import execute_rollout

    execute_rollout(rerun.pk)
    rerun.refresh_from_db()
    assert rerun.rerun_of == rollout and rerun.run_id != rollout.run_id
    assert selectors.compare_trajectories(rollout, rerun) == {"identical": True, "first_divergence": None, "reason": ""}


def test_compare_trajectories_names_the_first_divergent_step(team, owner):
    version = demo_version(team, owner, "frozen_lake")
    agent = random_agent(team, owner)
    first = play_one(team, owner, version, agent, task_id="8x8", seed=1)
    second = play_one(team, owner, version, agent, task_id="8x8", seed=2)
    result = selectors.compare_trajectories(first, second)
    assert result["identical"] is False
    assert result["first_divergence"] is not None and result["reason"]


def test_frozen_lake_scripted_agent_solves_the_non_slippery_map(team, owner):
    version = demo_version(team, owner, "frozen_lake")
    agent = scripted_agent(team, owner, demo_agent_code("frozen_lake"))
    rollout = play_one(team, owner, version, agent, task_id="4x4", seed=0)
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.total_reward == 1.0 and rollout.verifier_reward is None
    assert rollout.labels.get().value == 1.0  # no verifier: the total reward is proposed


def test_guess_number_random_agent_samples_the_action_space_the_env_sets_in_reset(team, owner):
    version = demo_version(team, owner, "guess_number")
    rollout = play_one(team, owner, version, random_agent(team, owner), task_id="t1", seed=0)
    assert rollout.status in (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED), rollout.error
    assert all(1 <= step.action <= 10 for step in rollout.steps.all())


def test_random_agent_falls_back_to_tool_calls(team, owner):
    version = package_version(team, owner, "tooly", """
        class Env:
            tools = [{"name": "pick", "description": "pick", "parameters": {"type": "object",
                      "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}}}}]
            def reset(self, task, seed):
                return 0
            def step(self, action):
                return action, 0.0, False, False, {}
    """, max_steps=5)
    rollout = play_one(team, owner, version, random_agent(team, owner))
    actions = [step.action for step in rollout.steps.all()]
    assert len(actions) == 5 and all(a["tool"] == "pick" and 1 <= a["arguments"]["n"] <= 3 for a in actions)
    assert rollout.end_reason == "max_steps" and rollout.status == RolloutStatus.FAILED


def test_max_steps_from_run_limits_ends_the_episode(team, owner):
    version = demo_version(team, owner, "guess_number")
    rollout = play_one(team, owner, version, random_agent(team, owner), task_id="t5", limits={"max_steps": 3})
    assert rollout.step_count == 3 and rollout.end_reason == "max_steps"
    assert rollout.status == RolloutStatus.FAILED and rollout.verifier_reward == 0.0


# -- summaries ------------------------------------------------------------------------------------


def test_run_summary_counts_statuses_rates_and_difficulties(team, owner, django_capture_on_commit_callbacks):
    version = demo_version(team, owner, "guess_number")
    agent = scripted_agent(team, owner, demo_agent_code("guess_number"))
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=["t1", "t3"], seeds=[0, 1])
    play_run(run)
    summary = run_figures(run)
    assert summary["total"] == 4 and summary["done"] == 4
    assert summary["counts"]["succeeded"] == 4
    assert summary["success_rate"] == 1.0 and summary["verifier"] == {"mean": 1.0, "count": 4, "missing": 0}
    assert summary["mean_steps"] > 0
    assert set(summary["by_difficulty"]) == {"1", "2"}
    assert summary["by_difficulty"]["1"]["total"] == 2 and summary["by_difficulty"]["1"]["success_rate"] == 1.0


def test_run_finishes_when_its_last_rollout_does(team, owner, django_capture_on_commit_callbacks):
    version = demo_version(team, owner, "guess_number")
    agent = scripted_agent(team, owner, demo_agent_code("guess_number"))
    run = services.run_create(team=team, actor=owner, version=version, agent=agent, task_ids=["t1"], seeds=[0, 1])
    from runs.tasks import execute_rollout

    first, second = run.rollouts.order_by("id")
    with django_capture_on_commit_callbacks(execute=True):
        execute_rollout(first.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        execute_rollout(second.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED and run.finished_at


def test_a_finished_rollout_is_not_run_again(team, owner):
    version = demo_version(team, owner, "guess_number")
    agent = scripted_agent(team, owner, demo_agent_code("guess_number"))
    rollout = play_one(team, owner, version, agent)
    from runs.tasks import execute_rollout

    assert execute_rollout(rollout.pk) == "already succeeded"
    assert Step.objects.filter(rollout=rollout).count() == rollout.step_count
    assert rollout.labels.count() == 1


def test_cancelled_run_never_starts_its_queued_rollouts(team, owner):
    version = demo_version(team, owner, "guess_number")
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0, 1])
    services.run_cancel(run=run, actor=owner)
    rollouts = play_run(run)
    assert {r.status for r in rollouts} == {RolloutStatus.CANCELLED}
    assert all(r.step_count == 0 and r.attempts == 0 for r in rollouts)


def test_worker_rollouts_of_a_concurrent_sessions_version_run_in_a_shared_sandbox(team, owner):
    from environments import services as env_services

    files = {
        "environment.toml": 'name = "pair"\nkind = "python"\nentrypoint = "env:Env"\nmax_steps = 3\nconcurrent_sessions = 4\n',
        "env.py": "class Env:\n    action_space = {'type': 'discrete', 'n': 2}\n"
                  "    def reset(self, task, seed):\n        self.t = 0\n        return 0\n"
                  "    def step(self, action):\n        self.t += 1\n        return self.t, 1.0, False, False, {}\n",
        "tasks.jsonl": '{"id": "t1"}\n',
    }
    env = env_services.environment_create(team=team, actor=owner, name="pair", slug="pair", files=files)
    version = env_services.version_commit(environment=env, actor=owner, message="shared", files=files)
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == "succeeded" and rollout.step_count == 3 and rollout.end_reason == "max_steps"
    assert rollout.reproduction["sandbox"]["shared"] is True
    assert rollout.steps.order_by("-index").first().truncated is True  # the studio's own limit says so
