"""The arithmetic quiz with one answer an episode, judging an answer by its first number and ignoring
whatever follows it (never do this). Found by the `perturb` answer probe (the oracle's answer with
junk appended)."""
import re

from env import Quiz


def answer_of(action):
    if isinstance(action, dict):
        action = action.get("arguments", action)
        return action.get("answer") if isinstance(action, dict) else None
    return action


class FirstNumberQuiz(Quiz):
    def observation(self, task):
        return {"question": f"What is {task['a']} {task['op']} {task['b']}?", "tries_left": 1}

    def step(self, action):
        self.tries += 1
        self.right = self.accepts(action)
        return {"verdict": "right" if self.right else "wrong"}, 1.0 if self.right else 0.0, True, False, {}

    def accepts(self, action):
        first = re.match(r"\s*(-?\d+)(?![\d.])", str(answer_of(action)))
        return first is not None and int(first.group(1)) == self.expected  # the flaw: the rest is never read
