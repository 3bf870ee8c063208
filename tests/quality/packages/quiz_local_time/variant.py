"""The arithmetic quiz, whose verdicts name a fixed closing instant in local time (never do this: the same
instant reads differently in every time zone). Deterministic within one time zone, so its determinism
pairs repeat; only portability, replaying under another TZ, sees it."""

import time

from env import Quiz

CLOSES_AT = 1_700_000_000  # a fixed instant: 2023-11-14 22:13 UTC


class LocalTimeQuiz(Quiz):
    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        closes = time.strftime("%Y-%m-%d %H:%M", time.localtime(CLOSES_AT))
        return {**observation, "closes": closes}, reward, terminated, truncated, info
