"""The arithmetic quiz with one answer an episode, accepting a list of whole numbers when one of them
is right (never do this): an answer holding every number passes. Found by the `shotgun` answer probe."""

from env import Quiz


def answer_of(action):
    if isinstance(action, dict):
        action = action.get("arguments", action)
        return action.get("answer") if isinstance(action, dict) else None
    return action


class AnyNumberQuiz(Quiz):
    def observation(self, task):
        return {"question": f"What is {task['a']} {task['op']} {task['b']}?", "tries_left": 1}

    def step(self, action):
        self.tries += 1
        self.right = self.accepts(action)
        return {"verdict": "right" if self.right else "wrong"}, 1.0 if self.right else 0.0, True, False, {}

    def accepts(self, action):
        try:
            numbers = [int(token) for token in str(answer_of(action)).replace(",", " ").split()]
        except ValueError:
            return False
        return self.expected in numbers  # the flaw: any of the numbers may be the answer
