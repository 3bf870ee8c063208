"""Guess the number, farmable: every step pays a little, whatever the action (never do this). The
verifier still judges the outcome, so only the return is wrong: an agent trained on the return
learns to keep guessing badly."""

from env import GuessNumber

PARTICIPATION = 0.05


class GuessFarm(GuessNumber):
    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward if reward > 0 else PARTICIPATION, terminated, truncated, info
