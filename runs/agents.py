"""The agent side of a rollout, as the engine drives it: a policy answers observations with actions.

Random and scripted agents both run in an agent sandbox of their own, with the rollout's limits,
never in the worker and never in the env's sandbox: the random agent is the SDK's
studio_sdk.random_agent (seeded by the rollout seed, so a rerun repeats every action), told the
env's action space and tools with each act.
"""
import hashlib

from django.conf import settings

from environments.sdk.studio_sdk import random_agent

from .agent_errors import NoActionSpace
from .models import Agent, AgentKind
from .sandbox import DEFAULT_CONFIG, Sandbox, SandboxConfig, SandboxError, SandboxLimits, UserCodeError
from .sandbox.backends import sandbox_for

SCRIPTED_AGENT_FILE = "agent.py"
# The reference a run gives (New run's choice, the API's `"agent": "version"`, `run_rollouts --agent
# version`) for the scripted agent its own version ships (version_agent_file).
VERSION_AGENT = "version"


def code_hash(code: str) -> str:
    """sha256 of an agent's code; "" for an agent with no code (random, model, human), never the hash
    of the empty string dressed up as the hash of some code."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest() if code else ""


def oracle_path(version) -> str:
    """The package's reference solution: oracle.py, or the file `[quality] oracle` names."""
    return str((version.manifest.get("quality") or {}).get("oracle") or "oracle.py")


def version_agent_file(version) -> str | None:
    """The scripted agent a version ships, run as any scripted agent (in an agent sandbox of its own):
    the file `[quality] oracle` names, else agent.py, else oracle.py; None when it ships none."""
    for path in (oracle_path(version), SCRIPTED_AGENT_FILE, "oracle.py"):
        if path in version.files:
            return path
    return None


# The agent module of a random agent's sandbox: the SDK's sampler, nothing of the worker.
RANDOM_AGENT_CODE = "from studio_sdk.random_agent import act, observe_space, reset  # noqa: F401\n"
RANDOM_AGENT_FAILURE = "random agent"


def agent_sandbox(config: SandboxConfig = DEFAULT_CONFIG) -> Sandbox:
    """An agent's sandbox of the configured backend; a process one is spawned at once, so its
    interpreter starts while the environment's sandbox starts (load comes with the limits).
    `config` carries the version's import path: the agent imports from the same read-only
    dependency environment as the environment (numpy, minigrid, ...)."""
    sandbox = sandbox_for(settings.SANDBOX_BACKEND, config)
    if sandbox.backend == "process":
        try:
            sandbox.spawn()
        except SandboxError:
            # start() spawns again and its error ends the episode with the reason, as for any agent.
            sandbox.close()
            sandbox = sandbox_for(settings.SANDBOX_BACKEND, config)
    return sandbox


class RandomPolicy:
    step_record: dict | None = None  # what a model agent records per action; these record nothing

    def __init__(self, agent: Agent, *, seed: int, sandbox_config: SandboxConfig = DEFAULT_CONFIG):
        self.agent = agent
        self.env = None
        self.sandbox: Sandbox = agent_sandbox(sandbox_config)
        self.facts: dict = {}

    def start(self, *, env: Sandbox, task: dict, seed: int, limits: SandboxLimits) -> None:
        self.env = env
        self.facts = self.sandbox.start({SCRIPTED_AGENT_FILE: RANDOM_AGENT_CODE}, mode="agent", entrypoint="agent", limits=limits)
        self.sandbox.reset(task, seed)

    def act(self, observation, info):
        # The env may publish or change its action space in reset (guess_number does), so read it late.
        space = {"action_space": self.env.action_space, "tools": self.env.tools or None}
        if not random_agent.reads_observation(space["action_space"]):
            observation = None  # it samples the space alone: spare an image frame the trip to its sandbox
        try:
            return self.sandbox.act(observation, info, space=space)
        except UserCodeError as exc:
            if RANDOM_AGENT_FAILURE in exc.message:
                raise NoActionSpace(exc.message.removeprefix("ValueError: ").split(" (agent.py")[0]) from None
            raise

    def close(self) -> None:
        self.sandbox.close()


class ScriptedPolicy:
    step_record: dict | None = None  # what a model agent records per action; these record nothing

    def __init__(self, agent: Agent, *, seed: int, sandbox_config: SandboxConfig = DEFAULT_CONFIG):
        self.agent = agent
        self.sandbox: Sandbox = agent_sandbox(sandbox_config)
        self.facts: dict = {}

    def start(self, *, env: Sandbox, task: dict, seed: int, limits: SandboxLimits) -> None:
        self.facts = self.sandbox.start(
            {SCRIPTED_AGENT_FILE: self.agent.code}, mode="agent", entrypoint="agent", limits=limits
        )
        self.sandbox.reset(task, seed)

    def act(self, observation, info):
        return self.sandbox.act(observation, info)

    def close(self) -> None:
        self.sandbox.close()


def policy_for(agent: Agent, *, seed: int, manifest: dict | None = None, sandbox_config: SandboxConfig = DEFAULT_CONFIG):
    """The policy that acts for `agent`; `manifest` (the version's) carries what an agent may need of
    the environment's declarations (a model agent: `text_answer`); `sandbox_config` is the agent
    sandbox's (the version's import path, as the environment's sandbox has it)."""
    if agent.kind == AgentKind.RANDOM:
        return RandomPolicy(agent, seed=seed, sandbox_config=sandbox_config)
    if agent.kind == AgentKind.SCRIPTED:
        return ScriptedPolicy(agent, seed=seed, sandbox_config=sandbox_config)
    if agent.kind == AgentKind.OPENAI:
        from .openai_agent import OpenAIPolicy

        return OpenAIPolicy(agent, seed=seed, text_answer=(manifest or {}).get("text_answer"))
    raise NoActionSpace(f"agents of kind {agent.kind!r} cannot run in this worker yet")
