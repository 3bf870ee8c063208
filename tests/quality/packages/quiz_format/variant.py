"""The arithmetic quiz with one answer an episode, whose verifier checks only that the answer has the
format its schema gives (three digits), never its value (never do this). Found by the `junk` answer
probe (schema-valid junk). Its one task is a three-digit answer; with several tasks, another task's
answer of the same format would pass too (the `cross` probe)."""
import re

from env import Quiz
from studio_sdk import tool


def answer_of(action):
    if isinstance(action, dict):
        action = action.get("arguments", action)
        return action.get("answer") if isinstance(action, dict) else None
    return action


class FormatQuiz(Quiz):
    tools = [tool("answer", "Answer the question with the result as three digits.",
                  {"type": "object", "properties": {"answer": {"type": "string", "pattern": "^[0-9]{3}$"}}, "required": ["answer"]})]
    action_space = None  # agents answer through the tool

    def observation(self, task):
        return {"question": f"What is {task['a']} {task['op']} {task['b']}?", "tries_left": 1}

    def step(self, action):
        self.tries += 1
        self.right = re.fullmatch(r"[0-9]{3}", str(answer_of(action)).strip()) is not None  # the flaw: format only
        return {"verdict": "right" if self.right else "wrong"}, 1.0 if self.right else 0.0, True, False, {}
