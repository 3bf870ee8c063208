"""The arithmetic quiz, judged by chance: a wrong answer gets a "partial credit" drawn on every call of
verify() (never do this). Too little to reward any probe (under 0.02, the threshold is 0.05), and the
right answer always gets 1.0, so only re-judging the same final state shows it: verifier consistency."""

import random

from env import Quiz


class DiceQuiz(Quiz):
    def verify(self):
        if self.right:
            return 1.0, "right answer"
        return round(random.uniform(0.0, 0.02), 4), f"partial credit for {self.tries} tries"
