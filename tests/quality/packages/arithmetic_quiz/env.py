"""A clean arithmetic quiz (a quality-lab control: every check stays green): the question shows two
numbers, the hidden `answer` is their result; three tries, reward only for the right answer."""

from studio_sdk import Environment, tool

TRIES = 3


def parse_answer(action):
    """A whole number from 12, "12", {"answer": 12} or a tool call {"tool": "answer", "arguments": {"answer": 12}}."""
    if isinstance(action, dict):
        action = action.get("arguments", action)
        action = action.get("answer") if isinstance(action, dict) else None
    if isinstance(action, bool):
        return None
    if isinstance(action, int):
        return action
    try:
        return int(str(action).strip())
    except ValueError:
        return None


class Quiz(Environment):
    tools = [tool("answer", "Answer the question with a whole number.",
                  {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]})]
    action_space = {"type": "discrete", "n": 1000}

    def reset(self, task, seed):
        self.expected = int(task["answer"])
        self.tries, self.right = 0, False
        return self.observation(task)

    def observation(self, task):
        return {"question": f"What is {task['a']} {task['op']} {task['b']}?", "tries_left": TRIES}

    def step(self, action):
        self.tries += 1
        self.right = parse_answer(action) == self.expected
        done = self.right or self.tries >= TRIES
        said = "right" if self.right else "wrong, try again" if not done else "wrong"
        return {"verdict": said, "tries_left": TRIES - self.tries}, 1.0 if self.right else 0.0, done, False, {}

    def verify(self):
        return (1.0, "right answer") if self.right else (0.0, f"no right answer in {self.tries} tries")
