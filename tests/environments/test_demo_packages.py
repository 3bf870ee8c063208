"""The demo packages are valid and their scripted agents solve them, judged by their verifiers."""

import pytest
from studio_sdk import GymnasiumEnvironment

from environments.package import parse_manifest, parse_tasks, validate_package

DEMOS = ["guess_number", "frozen_lake", "inventory_tools"]


def play(env, agent, task, seed, hidden_fields, max_steps):
    """One episode in-process the way the worker runs it: the agent never sees hidden task fields."""
    visible_task = {key: value for key, value in task.items() if key not in hidden_fields}
    observation, info = env.reset(task, seed), {}
    if hasattr(agent, "reset"):
        agent.reset(visible_task, seed)
    total, steps = 0.0, 0
    for steps in range(1, max_steps + 1):
        observation, reward, terminated, truncated, info = env.step(agent.act(observation, info))
        total += reward
        if terminated or truncated:
            break
    return total, steps


def load_demo(name, demo_package, demo_path, load_module):
    files = demo_package(name)
    manifest = parse_manifest(files)
    module_name, class_name = manifest["entrypoint"].split(":")
    if module_name == "gymnasium":
        make_env = lambda: GymnasiumEnvironment(class_name)  # noqa: E731
    else:
        env_class = getattr(load_module(demo_path(name) / f"{module_name}.py"), class_name)
        make_env = env_class
    agent = load_module(demo_path(name) / "agent.py")
    return manifest, parse_tasks(files), make_env, agent


@pytest.mark.parametrize("name", DEMOS)
def test_demo_package_validates(name, demo_package):
    files = demo_package(name)
    assert validate_package(files) == []
    assert "agent.py" in files
    assert all(isinstance(task.get("difficulty"), int) for task in parse_tasks(files))


@pytest.mark.parametrize("name", ["guess_number", "inventory_tools"])
@pytest.mark.parametrize("seed", [0, 1, 17])
def test_scripted_agent_solves_every_task(name, seed, demo_package, demo_path, load_module):
    manifest, tasks, make_env, agent = load_demo(name, demo_package, demo_path, load_module)
    for task in tasks:
        env = make_env()
        total, steps = play(env, agent, task, seed, manifest["hidden_task_fields"], manifest["max_steps"])
        reward, reason = env.verify()
        assert reward == 1.0, (task["id"], reason)
        assert total > 0


def test_guess_number_is_deterministic_per_task_and_seed(demo_path, load_module):
    GuessNumber = load_module(demo_path("guess_number") / "env.py").GuessNumber
    task = {"id": "t3", "low": 1, "high": 100}
    secrets = set()
    for seed in range(5):
        first, second = GuessNumber(), GuessNumber()
        first.reset(task, seed)
        second.reset(task, seed)
        assert first.secret == second.secret
        secrets.add(first.secret)
    assert len(secrets) > 1


def test_guess_number_hints_rewards_and_verifier(demo_path, load_module):
    env = load_module(demo_path("guess_number") / "env.py").GuessNumber()
    env.reset({"id": "t1", "low": 1, "high": 10}, 0)
    secret = env.secret
    wrong = 1 if secret != 1 else 2
    observation, reward, terminated, _, _ = env.step({"guess": wrong})
    assert observation == f"{wrong} is {'too low' if wrong < secret else 'too high'}"
    assert reward < 0 and not terminated
    assert env.verify()[0] == 0.0
    assert env.step("seven")[0].startswith("invalid guess")
    observation, reward, terminated, _, _ = env.step(secret)
    assert (reward, terminated) == (1.0, True)
    assert env.verify() == (1.0, f"guessed {secret} in 3 steps")


def test_inventory_wrong_answer_scores_zero(demo_path, load_module):
    env = load_module(demo_path("inventory_tools") / "env.py").InventoryTools()
    task = {"id": "q1", "question": "How many blue widgets are in stock?", "answer": "42"}
    env.reset(task, 0)
    assert env.verify() == (0.0, "no answer submitted")
    observation, reward, terminated, _, _ = env.step({"tool": "lookup_item", "arguments": {"name": "blue widget"}})
    assert observation["last_tool_result"]["quantity"] == 42 and not terminated
    observation, reward, terminated, _, _ = env.step({"tool": "submit_answer", "arguments": {"answer": "41"}})
    assert (reward, terminated) == (0.0, True)
    assert env.verify()[0] == 0.0


def test_inventory_answers_are_normalized(demo_path, load_module):
    env = load_module(demo_path("inventory_tools") / "env.py").InventoryTools()
    env.reset({"id": "q5", "question": "value?", "answer": "171.50"}, 0)
    # OpenAI-style call with JSON-text arguments, a dollar sign and a trailing period.
    env.step({"name": "submit_answer", "arguments": '{"answer": "$171.5."}'})
    assert env.verify()[0] == 1.0


def test_inventory_agent_never_sees_the_answer(demo_package, demo_path, load_module):
    manifest, tasks, make_env, agent = load_demo("inventory_tools", demo_package, demo_path, load_module)
    assert "answer" in manifest["hidden_task_fields"]
    env = make_env()
    for tool_spec in env.tools:
        assert set(tool_spec) == {"name", "description", "parameters"}
    # A task whose hidden answer is wrong on purpose: the agent still answers from the tools.
    task = {**tasks[0], "answer": "999"}
    play(env, agent, task, 0, manifest["hidden_task_fields"], manifest["max_steps"])
    assert env.submitted == "42"
    assert env.verify()[0] == 0.0


@pytest.mark.parametrize("task_id", ["4x4", "8x8"])
def test_frozen_lake_agent_reaches_the_goal_on_non_slippery_maps(task_id, demo_package, demo_path, load_module):
    manifest, tasks, make_env, agent = load_demo("frozen_lake", demo_package, demo_path, load_module)
    task = next(task for task in tasks if task["id"] == task_id)
    total, steps = play(make_env(), agent, task, 0, manifest["hidden_task_fields"], manifest["max_steps"])
    assert total == 1.0
    assert steps == (6 if task_id == "4x4" else 14)
