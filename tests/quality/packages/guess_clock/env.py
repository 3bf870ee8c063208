"""Guess the number, nondeterministic: each hint carries the wall-clock time (never do this)."""

import time

from studio_sdk import Environment, tool

STEP_PENALTY = -0.01


class GuessClock(Environment):
    tools = [
        tool(
            "guess",
            "Guess the secret whole number; the answer says whether it is too low or too high.",
            {"type": "object", "properties": {"guess": {"type": "integer"}}, "required": ["guess"]},
        )
    ]

    def reset(self, task, seed):
        self.low, self.high = int(task.get("low", 1)), int(task.get("high", 100))
        self.seed_rng(seed, task["id"])
        self.secret = self.rng.randint(self.low, self.high)
        self.steps = 0
        self.solved = False
        # Random agents sample whole numbers in the task's range.
        self.action_space = {"type": "discrete", "n": self.high - self.low + 1, "start": self.low}
        return f"Guess a whole number between {self.low} and {self.high}."

    def step(self, action):
        self.steps += 1
        guess = parse_guess(action)
        if guess is None:
            return f"invalid guess {action!r}: send a whole number", STEP_PENALTY, False, False, {"valid": False}
        if guess == self.secret:
            self.solved = True
            return f"{guess} is correct", 1.0, True, False, {"valid": True, "steps": self.steps}
        hint = "too low" if guess < self.secret else "too high"
        return f"{guess} is {hint} (at {time.time():.6f})", STEP_PENALTY, False, False, {"valid": True}

    def verify(self):
        if self.solved:
            return 1.0, f"guessed {self.secret} in {self.steps} steps"
        return 0.0, f"did not guess the number in {self.steps} steps"


def parse_guess(action):
    """A whole number from 37, "37", {"guess": 37} or a tool call {"tool": "guess", "arguments": {...}}."""
    if isinstance(action, dict):
        action = action.get("arguments", action)
        action = action.get("guess") if isinstance(action, dict) else None
    if isinstance(action, bool):
        return None
    if isinstance(action, int):
        return action
    if isinstance(action, float) and action.is_integer():
        return int(action)
    if isinstance(action, str):
        try:
            return int(action.strip())
        except ValueError:
            return None
    return None
