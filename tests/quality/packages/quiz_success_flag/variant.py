"""The arithmetic quiz with one answer an episode, believing an answer that says it succeeded
({"success": true}) (never do this). The claim probe's first candidate is its claim as plain text: it
catches this only because its candidates rotate across episodes."""

from env import Quiz, parse_answer


class FlagQuiz(Quiz):
    def observation(self, task):
        return {"question": f"What is {task['a']} {task['op']} {task['b']}?", "tries_left": 1}

    def step(self, action):
        self.tries += 1
        self.right = self.accepts(action)
        return {"verdict": "right" if self.right else "wrong"}, 1.0 if self.right else 0.0, True, False, {}

    def accepts(self, action):
        if isinstance(action, dict) and action.get("success") is True:
            return True  # the flaw: the agent's word is taken for the outcome
        return parse_answer(action) == self.expected
