"""Small builders for rollout tests: demo and hand-written package versions, agents, eager runs."""
import json
import textwrap

from environments import services as env_services
from environments.demo import DEMO_DIR, read_folder  # noqa: F401 - DEMO_DIR is re-exported for tests
from runs import services
from runs.models import Rollout
from runs.tasks import execute_rollout

# An environment whose episodes end only at max_steps: observation 0 and reward 0 at every step.
IDLE_ENV_PY = """
class Env:
    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 0.0, False, False, {}
"""


def demo_version(team, actor, name: str):
    """A version of environments/demo_packages/<name> in `team`."""
    files = read_folder(DEMO_DIR / name)
    env = env_services.environment_create(team=team, actor=actor, name=name, slug=name.replace("_", "-"), files=files)
    return env_services.version_commit(environment=env, actor=actor, message="demo", files=files)


def demo_agent_code(name: str) -> str:
    return (DEMO_DIR / name / "agent.py").read_text()


def package_version(team, actor, slug: str, env_py: str, *, tasks=None, entrypoint="env:Env", max_steps=50,
                    limits=None, hidden=None):
    """A version from env.py source (dedented) and task dicts."""
    tasks = tasks or [{"id": "t1", "difficulty": 1}]
    limit_lines = "".join(f"{key} = {value}\n" for key, value in (limits or {}).items())
    toml = (
        f'name = "{slug}"\nkind = "python"\nentrypoint = "{entrypoint}"\nmax_steps = {max_steps}\n'
        + (f"hidden_task_fields = {json.dumps(hidden)}\n" if hidden is not None else "")
        + (f"\n[limits]\n{limit_lines}" if limit_lines else "")
    )
    files = {
        "environment.toml": toml,
        "env.py": textwrap.dedent(env_py),
        "tasks.jsonl": "".join(json.dumps(task) + "\n" for task in tasks),
    }
    env = env_services.environment_create(team=team, actor=actor, name=slug, slug=slug, files=files)
    return env_services.version_commit(environment=env, actor=actor, message="test", files=files)


def random_agent(team, actor):
    return services.agent_get_or_create(team=team, actor=actor, name="random", kind="random")


def scripted_agent(team, actor, code: str, name="scripted"):
    return services.agent_create(team=team, actor=actor, name=name, kind="scripted", code=textwrap.dedent(code))


def play_run(run) -> list[Rollout]:
    """Execute every rollout of the run in this process (the Celery task body), in order."""
    for rollout_id in run.rollouts.order_by("id").values_list("id", flat=True):
        execute_rollout(rollout_id)
    return list(run.rollouts.order_by("id"))


def play_one(team, actor, version, agent, *, task_id="t1", seed=0, limits=None) -> Rollout:
    run = services.run_create(team=team, actor=actor, version=version, agent=agent, task_ids=[task_id], seeds=[seed],
                              limits=limits)
    (rollout,) = play_run(run)
    return rollout
