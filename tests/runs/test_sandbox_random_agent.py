"""The built-in random agent samples a bounded declared space in the worker (no second sandbox, the same
draws as its agent sandbox makes) and anything else in an agent sandbox of its own, with the rollout's
limits: a huge action space costs the worker nothing, every environment kind gets valid actions (browser pages
included), and a version with nothing to sample is told so at commit. The README's Counter example
works with every built-in agent."""

import re
import resource
import time
from pathlib import Path

import pytest

from environments import package
from runs.agents import RANDOM_AGENT_CODE, SCRIPTED_AGENT_FILE
from runs.models import RolloutStatus
from runs.sandbox import ProcessSandbox
from tests.agents.conftest import model_agent, model_server, reply, tool_call  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version, play_one, random_agent, scripted_agent

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_counter() -> str:
    match = re.search(r"```python\n(from studio_sdk import Environment, tool\n\nclass Counter.*?)```", README.read_text(), re.S)
    assert match, "the README's Counter example is gone"
    return match.group(1)


def test_a_huge_text_space_is_sampled_in_the_agent_sandbox_not_the_worker(team, owner):
    version = package_version(team, owner, "hugetext", """
        class Env:
            def reset(self, task, seed):
                self.action_space = {"type": "text", "max_length": 10 ** 8}  # not a literal: seen at run time
                return "type anything"
            def step(self, action):
                return "ok", 0.0, True, False, {}
    """, limits={"step_timeout_s": 3})
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    rollout = play_one(team, owner, version, random_agent(team, owner))
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert rollout.status == RolloutStatus.ERRORED, (rollout.status, rollout.error)
    assert "max_length must be an integer from 1 to 10000" in rollout.error
    worker_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert worker_cpu < 2.0 and time.monotonic() - started < 15
    assert rollout.reproduction["agent_sandbox"]["mode"] == "agent"


def test_a_literal_space_over_the_bounds_is_refused_at_commit(team, owner):
    files = {
        "environment.toml": 'name = "x"\nkind = "python"\nentrypoint = "env:Env"\n',
        "tasks.jsonl": '{"id": "t1"}\n',
        "env.py": "class Env:\n    action_space = {'type': 'text', 'max_length': 10**8}\n",
    }
    # 10**8 is not a literal: bounded at sampling time; a literal one is refused now.
    assert package.validate_package(files) == []
    files["env.py"] = "class Env:\n    action_space = {'type': 'text', 'max_length': 100000000}\n"
    (problem,) = package.validate_package(files)
    assert (problem.file, problem.line) == ("env.py", 2) and "max_length" in problem.reason


def test_a_version_with_no_action_space_and_no_tools_is_warned_on_its_page(client, team, owner):
    version = package_version(team, owner, "mute", """
        from studio_sdk import Environment
        class Env(Environment):
            def reset(self, task, seed):
                return 0
            def step(self, action):
                return 0, 0.0, True, False, {}
    """)
    client.force_login(owner)
    page = client.get(f"/t/{team.slug}/environments/{version.environment.slug}/versions/{version.number}/")
    assert page.status_code == 200
    assert b"offers no action_space and no tools" in page.content
    rollout = play_one(team, owner, version, random_agent(team, owner))
    assert rollout.status == RolloutStatus.ERRORED
    assert rollout.error == "random agent: the environment has no action_space and no tools to sample from"


def test_random_rollouts_repeat_for_the_same_seed(team, owner):
    version = package_version(team, owner, "repeat", readme_counter(), entrypoint="env:Counter",
                              tasks=[{"id": "t1", "goal": 9}])
    agent = random_agent(team, owner)
    first, again = (play_one(team, owner, version, agent, seed=3) for _ in range(2))
    actions = [[step.action for step in rollout.steps.order_by("index")] for rollout in (first, again)]
    assert actions[0] == actions[1] and len(actions[0]) >= 5


def test_the_readme_counter_works_with_every_built_in_agent(team, owner, model_agent, model_server):
    version = package_version(team, owner, "counter", readme_counter(), entrypoint="env:Counter",
                              tasks=[{"id": "t1", "goal": 4}])
    assert package.package_warnings(dict(version.files)) == []
    scripted = scripted_agent(team, owner, """
        def act(observation, info):
            return 2
    """)
    model_server.add(*[reply(tool_call("add", {"k": 2}, f"c{i}")) for i in range(2)])
    for agent in (random_agent(team, owner), scripted, model_agent()):
        rollout = play_one(team, owner, version, agent)
        assert rollout.status == RolloutStatus.SUCCEEDED, (agent.kind, rollout.error)
        assert rollout.verifier_reward == 1.0 or agent.kind == "random", (agent.kind, rollout.verifier_reason)


@pytest.mark.browser
def test_random_agent_acts_on_a_browser_pages_elements(team, owner, settings, tmp_path):
    from runs.episodes import close_browser_pool
    from tests.browser_envs.conftest import browser_version
    from tests.runs.rollout_factories import DEMO_DIR, read_folder

    settings.MEDIA_ROOT = str(tmp_path / "media")
    version = browser_version(team, owner, "web_form", read_folder(DEMO_DIR / "web_form"))
    try:
        rollout = play_one(team, owner, version, random_agent(team, owner), task_id=version.tasks[0]["id"])
    finally:
        close_browser_pool()
    assert rollout.status in (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED), rollout.error
    steps = list(rollout.steps.order_by("index"))
    assert len(steps) >= 3
    kinds = {step.action["action"] for step in steps}
    assert kinds <= {"click", "fill", "select", "scroll"} and kinds & {"click", "fill", "select"}
    # Valid actions on the page's own elements: the page accepted (nearly) every one.
    refused = [step.observation.get("error") for step in steps if step.observation.get("error")]
    assert len(refused) <= len(steps) // 3, refused


SPACES_ENV = """
class Env:
    def reset(self, task, seed):
        self.t = 0
        self.action_space = SPACES[task["id"]]
        return {"t": 0}

    def step(self, action):
        self.t += 1
        return {"t": self.t}, 0.0, self.t >= 6, False, {"action": action}

SPACES = {
    "discrete": {"type": "discrete", "n": 7, "start": -3},
    "box": {"type": "box", "shape": [2, 2], "low": [[-1.0, 0.0], [None, -5.0]], "high": 1.5, "dtype": "float32"},
    "unbounded-box": {"type": "box", "shape": [3], "low": float("-inf"), "high": float("inf")},
    "text": {"type": "text", "max_length": 12, "alphabet": "xyz"},
    "choice": {"type": "choice", "values": ["north", "south", 3, None]},
    "multi_discrete": {"type": "multi_discrete", "nvec": [2, 5, 9]},
    "multi_binary": {"type": "multi_binary", "n": [2, 3]},
}
"""
SPACE_TASKS = ["discrete", "box", "unbounded-box", "text", "choice", "multi_discrete", "multi_binary"]


def test_a_bounded_space_is_sampled_in_the_worker_with_the_agent_sandboxs_draws(team, owner):
    """The worker draws for declared spaces and tools (no agent sandbox: its reproduction says so) and
    draws exactly what the agent sandbox draws for the same seed and space, step by step (tool lists:
    the README's Counter below)."""
    version = package_version(team, owner, "spaces", SPACES_ENV, tasks=[{"id": t} for t in SPACE_TASKS], max_steps=6)
    agent = random_agent(team, owner)
    for task_id in SPACE_TASKS:
        rollout = play_one(team, owner, version, agent, task_id=task_id, seed=11)
        assert rollout.status == RolloutStatus.FAILED and not rollout.error, (task_id, rollout.error)  # no verify: 0
        assert rollout.reproduction["agent_sandbox"]["backend"] == "worker", task_id
        actions = [step.action for step in rollout.steps.order_by("index")]
        assert len(actions) == 6
        # The same draws from the SDK's sampler in an agent sandbox, told the space the env published.
        with ProcessSandbox() as env, ProcessSandbox() as sampler:
            env.start({"env.py": SPACES_ENV}, mode="env", entrypoint="env:Env")
            env.reset({"id": task_id}, 11)
            sampler.start({SCRIPTED_AGENT_FILE: RANDOM_AGENT_CODE}, mode="agent", entrypoint="agent")
            sampler.reset({"id": task_id}, 11)
            space = {"action_space": env.action_space, "tools": env.tools or None}
            in_sandbox = [sampler.act(None, {}, space=space) for _ in range(6)]
        assert actions == in_sandbox, task_id
