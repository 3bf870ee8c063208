"""Guess the number with an instance nobody can solve: for odd seeds the secret lies outside the
announced range (never do this). Any seed-0 audit calls it solvable; pass^k per seed does not."""

from env import GuessNumber


class GuessCliff(GuessNumber):
    def reset(self, task, seed):
        observation = super().reset(task, seed)
        if seed % 2:
            self.secret = self.high + 1
        return observation
