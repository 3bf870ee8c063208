"""Faults through the whole engine: each ends its rollout readably, keeps what was stored, and the
worker process goes on to run the next rollout normally."""
import os

import pytest

from runs import events
from runs.models import RolloutStatus

from rollout_factories import demo_agent_code, demo_version, package_version, play_one, random_agent, scripted_agent

pytestmark = pytest.mark.django_db

IS_ROOT = os.geteuid() == 0

COUNTING_ENV = """
import time

class Env:
    action_space = {"type": "discrete", "n": 3}

    def reset(self, task, seed):
        self.n = 0
        return 0

    def step(self, action):
        self.n += 1
        BODY
        return self.n, 1.0, self.n >= 5, False, {}

    def verify(self):
        VERIFY
        return 1.0, "counted to five"
"""


def counting_env(body="pass", verify="pass"):
    return COUNTING_ENV.replace("BODY", body).replace("VERIFY", verify)


@pytest.fixture
def then_a_normal_rollout_succeeds(team, owner):
    """After a fault: the same process runs a fresh episode to success."""

    def check():
        version = demo_version(team, owner, "guess_number")
        agent = scripted_agent(team, owner, demo_agent_code("guess_number"), name="binary-search")
        rollout = play_one(team, owner, version, agent, task_id="t2", seed=1)
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error

    return check


def test_env_raising_in_step_errors_with_file_and_line_and_keeps_earlier_steps(team, owner, then_a_normal_rollout_succeeds):
    version = package_version(team, owner, "raiser", counting_env('if self.n == 3:\n            raise ValueError("the floor is lava")'))
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.ERRORED
    assert rollout.error == "env.py step() raised ValueError: the floor is lava (env.py line 14)"
    assert rollout.step_count == 2 and list(rollout.steps.values_list("index", flat=True)) == [0, 1]
    assert rollout.labels.count() == 0
    then_a_normal_rollout_succeeds()


def test_env_exiting_the_process_errors_readably(team, owner, then_a_normal_rollout_succeeds):
    version = package_version(team, owner, "quitter", counting_env("import os; os._exit(3)"))
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.ERRORED
    assert "exited with status 3" in rollout.error and "step()" in rollout.error
    then_a_normal_rollout_succeeds()


def test_infinite_loop_in_step_times_out(team, owner, then_a_normal_rollout_succeeds):
    version = package_version(team, owner, "looper", counting_env("while self.n > 2: pass"), limits={"step_timeout_s": 1})
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.TIMED_OUT and rollout.end_reason == "timeout"
    assert "step() did not answer within 1.0 s" in rollout.error
    assert rollout.step_count == 2
    then_a_normal_rollout_succeeds()


def test_slow_episode_times_out_at_episode_timeout(team, owner):
    version = package_version(team, owner, "slowpoke", counting_env("time.sleep(0.4)"), max_steps=50,
                              limits={"step_timeout_s": 2, "episode_timeout_s": 1})
    version_tasks_never_end = version  # five steps of 0.4 s would take 2 s
    rollout = play_one(team, owner, version_tasks_never_end, random_agent(team, owner))
    assert rollout.status == RolloutStatus.TIMED_OUT
    assert "episode_timeout_s=1" in rollout.error
    assert 1 <= rollout.step_count <= 3


def test_verifier_raising_keeps_steps_and_sets_verifier_error(team, owner):
    version = package_version(team, owner, "badjudge", counting_env(verify='raise KeyError("score")'))
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.step_count == 5 and rollout.steps.count() == 5
    assert rollout.verifier_error == "env.py verify() raised KeyError: 'score' (env.py line 17)"
    assert rollout.verifier_reward is None and rollout.status == RolloutStatus.ERRORED
    assert rollout.labels.count() == 0


def test_verifier_sleeping_past_verify_timeout_keeps_steps(team, owner):
    version = package_version(team, owner, "slowjudge", counting_env(verify="time.sleep(5)"),
                              limits={"verify_timeout_s": 0.5})
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.steps.count() == 5
    assert rollout.verifier_error == "env.py verify() did not answer within verify_timeout_s=0.5 s"
    assert rollout.status == RolloutStatus.ERRORED


def test_verifier_gets_its_own_budget_even_at_the_end_of_the_episode_clock(team, owner):
    version = package_version(team, owner, "lastminute", counting_env("time.sleep(0.15)", verify="time.sleep(0.5)"),
                              limits={"episode_timeout_s": 1, "verify_timeout_s": 3})
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error or rollout.verifier_error


def test_hidden_task_fields_never_reach_the_agent(team, owner):
    version = package_version(team, owner, "secrets", """
        class Env:
            def reset(self, task, seed):
                self.task = task
                return {"question": task["question"]}
            def step(self, action):
                return {"env_saw_answer": "answer" in self.task}, 0.0, True, False, {}
    """, tasks=[{"id": "t1", "difficulty": 1, "question": "6 x 7?", "answer": "42"}], hidden=["answer"])
    agent = scripted_agent(team, owner, """
        seen = {}
        def reset(task, seed):
            seen.update(task)
        def act(observation, info):
            return {"task_keys": sorted(seen), "answer": seen.get("answer")}
    """)
    rollout = play_one(team, owner, version, agent)
    step = rollout.steps.get()
    assert step.action == {"task_keys": ["difficulty", "id", "question"], "answer": None}
    assert step.observation == {"env_saw_answer": True}


def test_scripted_agent_runs_in_its_own_sandbox_and_cannot_read_env_files(team, owner):
    version = package_version(team, owner, "private", """
        SECRET = "env-only"
        class Env:
            def reset(self, task, seed):
                import os
                return {"env_dir": os.getcwd()}
            def step(self, action):
                return 0, 0.0, True, False, {}
    """)
    agent = scripted_agent(team, owner, """
        import os
        def act(observation, info):
            try:
                found = os.listdir(observation["env_dir"])
            except OSError as exc:
                found = type(exc).__name__
            return {"mine": sorted(os.listdir(".")), "env_dir": found, "same_dir": os.getcwd() == observation["env_dir"]}
    """)
    rollout = play_one(team, owner, version, agent)
    action = rollout.steps.get().action
    # Each sandbox sees its own workspace at /sandbox: the env's path names the agent's own files.
    assert action["mine"] == ["agent.py"]
    assert action["env_dir"] in (["agent.py"], "PermissionError", "FileNotFoundError")
    assert "env.py" not in repr(action)


def test_agent_raising_errors_with_its_own_file_and_line(team, owner, then_a_normal_rollout_succeeds):
    version = package_version(team, owner, "plain", counting_env())
    agent = scripted_agent(team, owner, "def act(observation, info):\n    return 1 / 0\n")
    rollout = play_one(team, owner, version, agent)
    assert rollout.status == RolloutStatus.ERRORED
    assert rollout.error == "agent.py act() raised ZeroDivisionError: division by zero (agent.py line 2)"
    then_a_normal_rollout_succeeds()


def test_env_failing_to_load_errors_readably(team, owner):
    version = package_version(team, owner, "noimport", "import not_a_module_anywhere\n\nclass Env:\n    pass\n")
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.ERRORED
    assert "load() raised ModuleNotFoundError" in rollout.error and "not_a_module_anywhere" in rollout.error


def test_random_agent_without_anything_to_sample_errors_readably(team, owner):
    version = package_version(team, owner, "spaceless", """
        class Env:
            def reset(self, task, seed):
                return 0
            def step(self, action):
                return 0, 0.0, False, False, {}
    """)
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.ERRORED and "no action_space and no tools" in rollout.error


def test_a_large_observation_under_the_versions_limit_is_stored_whole_never_replaced_by_a_note(team, owner):
    version = package_version(team, owner, "bigmouth", """
        class Env:
            action_space = {"type": "discrete", "n": 2}
            def reset(self, task, seed):
                return "small"
            def step(self, action):
                return "x" * 400_000, 1.0, True, False, {}
    """)
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.SUCCEEDED
    assert rollout.steps.get().observation == "x" * 400_000


def test_a_broken_channel_layer_does_not_break_the_rollout(team, owner, monkeypatch):
    def broken():
        raise ConnectionError("redis is down")

    monkeypatch.setattr(events, "get_channel_layer", broken)
    version = package_version(team, owner, "quiet", counting_env())
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.SUCCEEDED and rollout.step_count == 5


def test_every_stored_step_is_published_to_the_rollout_and_run_groups(team, owner, monkeypatch):
    sent = []

    class Recorder:
        async def group_send(self, group, message):
            sent.append((group, message))

    monkeypatch.setattr(events, "get_channel_layer", lambda: Recorder())
    version = package_version(team, owner, "loud", counting_env())
    rollout = play_one(team, owner, version, random_agent(team, owner))
    groups = {group for group, _ in sent}
    assert groups == {f"rollout-{rollout.pk}", f"run-{rollout.run_id}"}
    published = [step["index"] for group, message in sent if group.startswith("rollout-") for step in message["steps"]]
    assert published == [0, 1, 2, 3, 4]


# -- workers that died -----------------------------------------------------------------------------


def _orphan(team, owner, *, attempts=1, worker="elsewhere:1:1", heartbeat_age_s=120):
    """A rollout left `running` by a worker that stopped beating, with two partial steps."""
    from datetime import timedelta

    from django.utils import timezone

    from runs import services
    from runs.models import Step

    version = package_version(team, owner, f"orphan-{attempts}-{heartbeat_age_s}", counting_env())
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), seeds=[0])
    rollout = run.rollouts.get()
    rollout.status, rollout.attempts, rollout.worker = RolloutStatus.RUNNING, attempts, worker
    rollout.heartbeat_at = timezone.now() - timedelta(seconds=heartbeat_age_s)
    rollout.save()
    Step.objects.bulk_create([Step(rollout=rollout, index=i, action=0, observation=i) for i in range(2)])
    return rollout


def test_redelivered_rollout_of_a_dead_worker_restarts_from_step_zero(team, owner):
    from runs.tasks import execute_rollout

    rollout = _orphan(team, owner)
    assert execute_rollout(rollout.pk) == RolloutStatus.SUCCEEDED
    rollout.refresh_from_db()
    assert rollout.attempts == 2 and rollout.step_count == 5
    assert list(rollout.steps.values_list("index", flat=True)) == [0, 1, 2, 3, 4]


def test_rollout_whose_worker_died_too_often_ends_errored(team, owner):
    from runs.tasks import execute_rollout

    rollout = _orphan(team, owner, attempts=3)
    assert execute_rollout(rollout.pk) == "too many attempts"
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.ERRORED and "died 3 times" in rollout.error and rollout.end_reason == "infra_error"


def test_recover_stale_rollouts_requeues_silent_ones_and_leaves_live_ones(team, owner, django_capture_on_commit_callbacks):
    from runs.episodes import worker

    stale = _orphan(team, owner)
    live = _orphan(team, owner, heartbeat_age_s=1)
    doomed = _orphan(team, owner, attempts=3, heartbeat_age_s=300)
    with django_capture_on_commit_callbacks() as callbacks:
        done = dict(worker.recover_stale_rollouts())
    assert done == {stale.pk: "requeued", doomed.pk: "errored"}
    assert len(callbacks) >= 1  # the requeued rollout is sent again after commit
    for rollout, status in ((stale, RolloutStatus.QUEUED), (live, RolloutStatus.RUNNING), (doomed, RolloutStatus.ERRORED)):
        rollout.refresh_from_db()
        assert rollout.status == status


def test_a_duplicate_delivery_leaves_a_live_workers_rollout_alone(team, owner, monkeypatch):
    from runs.episodes import status, worker
    from runs.tasks import execute_rollout

    rollout = _orphan(team, owner, heartbeat_age_s=1)
    later = []
    monkeypatch.setattr(worker, "rollout_send", lambda rollout_id, countdown=None: later.append((rollout_id, countdown)))
    assert execute_rollout(rollout.pk).startswith("running on elsewhere")
    assert later == [(rollout.pk, status.stale_after_s())]
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.RUNNING and rollout.attempts == 1


def test_nul_characters_in_observations_are_stored_replaced(team, owner):
    version = package_version(team, owner, "nul", """
        class Env:
            action_space = {"type": "discrete", "n": 2}
            def reset(self, task, seed):
                return 0
            def step(self, action):
                return "a\\x00b", 1.0, True, False, {"raw": "\\x00"}
    """)
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    step = rollout.steps.get()
    assert step.observation == "a\ufffdb" and step.info == {"raw": "\ufffd"}
