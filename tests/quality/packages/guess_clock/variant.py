"""Guess the number, nondeterministic: each hint carries the wall-clock time (never do this).
The demo's game (env.py beside this file) with one flaw added."""

import time

from env import GuessNumber


class GuessClock(GuessNumber):
    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        if "too" in observation:
            observation = f"{observation} (at {time.time():.6f})"
        return observation, reward, terminated, truncated, info
