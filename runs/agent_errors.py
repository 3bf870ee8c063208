"""What an agent can raise to the engine mid-episode: it cannot go on, a malformed action, or it stops.

Apart from runs.agents so every policy (random, scripted, model) can raise them without importing the
module that picks policies.
"""


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
