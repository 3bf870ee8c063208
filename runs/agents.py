"""The agent side of a rollout, as the engine drives it: a policy answers observations with actions.

Scripted agents run in an agent sandbox of their own, with the rollout's limits, never in the worker
and never in the env's sandbox. The random agent is the SDK's studio_sdk.random_agent (seeded by the
rollout seed, so a rerun repeats every action): the worker samples a bounded declared space or tool
list itself (data only; no code of the environment runs there), and any other space (a browser page,
one past the SDK's bounds) in an agent sandbox, told the env's action space and tools with each act.
"""
import hashlib
import json

from django.conf import settings

from environments.sdk.studio_sdk import action_space_problem, jsonable, random_agent
from environments.selectors import version_paths

from .agent_errors import NoActionSpace
from .models import Agent, AgentKind
from .sandbox import DEFAULT_CONFIG, Sandbox, SandboxConfig, SandboxError, SandboxLimits, UserCodeError
from .sandbox import protocol
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
    candidates = list(dict.fromkeys((oracle_path(version), SCRIPTED_AGENT_FILE, "oracle.py")))
    # A page that deferred the files (a version's tasks.jsonl may be MBs) asks the database for the paths.
    paths = version_paths(version) if "files" in version.get_deferred_fields() else version.files
    shipped = set(paths).intersection(candidates)
    return next((path for path in candidates if path in shipped), None)


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


# What the worker samples itself (23.4): a declared space that passes the SDK's bounds, or a tool list,
# of at most this many JSON bytes and this nesting; a browser page (the agent reads the page's text)
# and anything larger go to an agent sandbox.
WORKER_SPACE_MAX_BYTES = 64 * 1024
WORKER_SPACE_MAX_DEPTH = 16
WORKER_SAMPLER_FACTS = {
    "backend": "worker", "mode": "agent", "entrypoint": "studio_sdk.random_agent",
    "notes": ["a bounded action space, sampled in the worker: no code of the environment runs there"],
}


def worker_samplable(space: dict) -> dict | None:
    """The space (floats put back as the agent sandbox would see them) if the worker may sample it
    itself; None if it must go to an agent sandbox."""
    action_space = space.get("action_space")
    if random_agent.reads_observation(action_space):
        return None
    if action_space and action_space.get("type") != "unsupported" and action_space_problem(action_space):
        return None  # the sandbox says what is wrong, in the words it always has
    try:
        line = json.dumps(space, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError):
        return None
    if len(line) > WORKER_SPACE_MAX_BYTES or _depth(space) > WORKER_SPACE_MAX_DEPTH:
        return None
    return protocol.decode(line, floats=True)


def _depth(value, level: int = 0) -> int:
    if level > WORKER_SPACE_MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(item, level + 1) for item in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(item, level + 1) for item in value), default=level)
    return level


class RandomPolicy:
    """The random agent: the worker samples a bounded declared space itself (no second round trip per
    step); any other space is sampled in an agent sandbox of its own, started when first needed."""

    step_record: dict | None = None  # what a model agent records per action; these record nothing

    def __init__(self, agent: Agent, *, seed: int, sandbox_config: SandboxConfig = DEFAULT_CONFIG):
        self.agent = agent
        self.env = None
        self.sandbox: Sandbox | None = None
        self.sandbox_config = sandbox_config
        self.sampler = random_agent.RandomAgent()
        self.facts: dict = {}
        self.started: tuple | None = None
        self.checked: tuple | None = None  # (action space, tools, worker_samplable's answer) last seen

    def start(self, *, env: Sandbox, task: dict, seed: int, limits: SandboxLimits) -> None:
        self.env = env
        self.started = (task, seed, limits)
        self.sampler.reset(task, seed)
        if self._bounded(self._space()) is None:
            self._start_sandbox()
        else:
            self.facts = dict(WORKER_SAMPLER_FACTS)

    def _space(self) -> dict:
        # The env may publish or change its action space in reset (guess_number does), so read it late.
        return {"action_space": self.env.action_space, "tools": self.env.tools or None}

    def _bounded(self, space: dict) -> dict | None:
        """worker_samplable(space), checked again only when the env publishes another space or tool
        list (its sandbox replaces the objects then); the sampler is told the space as it changes."""
        seen = self.checked
        if seen is not None and seen[0] is space["action_space"] and seen[1] is space["tools"]:
            return seen[2]
        bounded = worker_samplable(space)
        if bounded is not None:
            self.sampler.observe_space(bounded)
        self.checked = (space["action_space"], space["tools"], bounded)
        return bounded

    def _start_sandbox(self) -> None:
        task, seed, limits = self.started
        self.sandbox = agent_sandbox(self.sandbox_config)
        self.facts = self.sandbox.start({SCRIPTED_AGENT_FILE: RANDOM_AGENT_CODE}, mode="agent", entrypoint="agent", limits=limits)
        self.sandbox.reset(task, seed)

    def act(self, observation, info):
        space = self._space()
        if self.sandbox is None:
            bounded = self._bounded(space)
            if bounded is not None:
                try:
                    # As the agent sandbox sends it: NaN, infinities and -0.0 in their envelopes.
                    return jsonable(self.sampler.act(None, info))
                except ValueError as exc:
                    if RANDOM_AGENT_FAILURE in str(exc):
                        raise NoActionSpace(str(exc)) from None
                except Exception:  # noqa: BLE001 - a malformed tool list: the sandbox reports it as it always has
                    pass
            # Past the worker's bounds (or a space it could not sample): from here on the sandbox samples,
            # and its error, if any, is the one the agent sandbox always gave.
            self._start_sandbox()
        if not random_agent.reads_observation(space["action_space"]):
            observation = None  # it samples the space alone: spare an image frame the trip to its sandbox
        try:
            return self.sandbox.act(observation, info, space=space)
        except UserCodeError as exc:
            if RANDOM_AGENT_FAILURE in exc.message:
                raise NoActionSpace(exc.message.removeprefix("ValueError: ").split(" (agent.py")[0]) from None
            raise

    def close(self) -> None:
        if self.sandbox is not None:
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
