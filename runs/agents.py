"""The agent side of a rollout, as the engine drives it: a policy answers observations with actions.

Random agents run in the worker (they only draw numbers, from an rng seeded by the rollout seed, so
a rerun repeats every action); scripted agents run in their own agent sandbox, never in the env's.
"""
import hashlib
import random
import string
import sys

from .models import Agent, AgentKind
from django.conf import settings

from .sandbox import ProcessSandbox, SandboxLimits
from .sandbox.backends import sandbox_for
from .sandbox.process import SDK_PATH

# The SDK is what sandboxes import; the worker needs only its pure-Python action sampler, so the
# random agent samples exactly as the SDK documents.
if str(SDK_PATH) not in sys.path:
    sys.path.append(str(SDK_PATH))
from studio_sdk import sample_action  # noqa: E402

SCRIPTED_AGENT_FILE = "agent.py"


def code_hash(code: str) -> str:
    """sha256 of an agent's code; "" for an agent with no code (random, model, human), never the hash
    of the empty string dressed up as the hash of some code."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest() if code else ""


class AgentFailed(Exception):
    """The agent cannot go on (its model endpoint keeps failing, it keeps making malformed calls):
    the rollout ends errored with this reason."""


class NoActionSpace(AgentFailed):
    """The environment offers nothing a random agent could sample from."""


class AgentStepError(Exception):
    """A malformed action (e.g. a tool call with bad arguments): recorded as a step with this
    reason, the environment is not called, and the agent is asked again."""

    def __init__(self, action, reason: str):
        super().__init__(reason)
        self.action, self.reason = action, reason


class AgentDone(Exception):
    """The agent stops acting (e.g. a model agent's turn limit, or its answer in text): the episode
    ends and is verified. `record`: what the agent recorded of its last turn, which took no step."""

    def __init__(self, end_reason: str, reason: str, record: dict | None = None):
        super().__init__(reason)
        self.end_reason, self.reason, self.record = end_reason, reason, record


class RandomPolicy:
    def __init__(self, agent: Agent, *, seed: int):
        self.agent = agent
        self.rng = random.Random(f"random-agent:{seed}")
        self.env = None
        self.facts: dict = {}

    def start(self, *, env: ProcessSandbox, task: dict, seed: int, limits: SandboxLimits) -> None:
        self.env = env

    def act(self, observation, info):
        # The env may publish or change its action space in reset (guess_number does), so read it late.
        space = self.env.action_space
        if space and space.get("type") != "unsupported":
            try:
                return sample_action(space, self.rng)
            except (ValueError, KeyError, TypeError) as exc:
                if not self.env.tools:
                    raise NoActionSpace(f"random agent cannot sample the action space {space!r}: {exc}") from None
        if self.env.tools:
            return sample_tool_call(self.env.tools, self.rng)
        raise NoActionSpace("random agent: the environment has no action_space and no tools to sample from")

    def close(self) -> None:
        pass


class ScriptedPolicy:
    def __init__(self, agent: Agent, *, seed: int):
        self.agent = agent
        self.sandbox: ProcessSandbox | None = None
        self.facts: dict = {}

    def start(self, *, env: ProcessSandbox, task: dict, seed: int, limits: SandboxLimits) -> None:
        self.sandbox = sandbox_for(settings.SANDBOX_BACKEND)
        self.facts = self.sandbox.start(
            {SCRIPTED_AGENT_FILE: self.agent.code}, mode="agent", entrypoint="agent", limits=limits
        )
        self.sandbox.reset(task, seed)

    def act(self, observation, info):
        return self.sandbox.act(observation, info)

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()


def policy_for(agent: Agent, *, seed: int, manifest: dict | None = None):
    """The policy that acts for `agent`; `manifest` (the version's) carries what an agent may need of
    the environment's declarations (a model agent: `text_answer`)."""
    if agent.kind == AgentKind.RANDOM:
        return RandomPolicy(agent, seed=seed)
    if agent.kind == AgentKind.SCRIPTED:
        return ScriptedPolicy(agent, seed=seed)
    if agent.kind == AgentKind.OPENAI:
        from .openai_agent import OpenAIPolicy

        return OpenAIPolicy(agent, seed=seed, text_answer=(manifest or {}).get("text_answer"))
    raise NoActionSpace(f"agents of kind {agent.kind!r} cannot run in this worker yet")


def sample_tool_call(tools: list[dict], rng: random.Random) -> dict:
    """A random call of one of the env's tools, with arguments drawn from its JSON schema."""
    spec = rng.choice(tools)
    spec = spec.get("function", spec)  # OpenAI's {"type": "function", "function": {...}} form too
    schema = spec.get("parameters") or {}
    arguments = {name: _sample_schema(prop, rng) for name, prop in sorted((schema.get("properties") or {}).items())}
    return {"tool": spec.get("name"), "arguments": arguments}


def _sample_schema(schema: dict, rng: random.Random):
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 0)), int(schema.get("maximum", 100)))
    if kind == "number":
        return rng.uniform(float(schema.get("minimum", 0)), float(schema.get("maximum", 100)))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_sample_schema(schema.get("items") or {}, rng) for _ in range(rng.randint(0, 3))]
    if kind == "object":
        return {name: _sample_schema(prop, rng) for name, prop in sorted((schema.get("properties") or {}).items())}
    return "".join(rng.choice(string.ascii_lowercase + " ") for _ in range(rng.randint(1, 12)))
