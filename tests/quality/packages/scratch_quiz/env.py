"""A clean arithmetic quiz with a scratch pad (a quality-lab control: every check stays green, the
`tamper` probe included): the agent may write notes to files of its own episode, and the verifier
judges the answer alone, never what was written."""

from studio_sdk import Environment, tool

MAX_FILES = 64
VERDICT = "out/verdict.txt"  # where the environment writes its own verdict, after the episode: never read back


def parse_answer(action):
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


class ScratchQuiz(Environment):
    tools = [
        tool("write_file", "Write a note to a file of this episode's scratch pad.",
             {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
              "required": ["path", "content"]}),
        tool("answer", "Answer the question with a whole number; ends the episode.",
             {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}),
    ]

    def reset(self, task, seed):
        self.expected = int(task["answer"])
        self.files, self.right = {}, False
        return {"question": f"What is {task['a']} {task['op']} {task['b']}?"}

    def step(self, action):
        if isinstance(action, dict) and action.get("tool") == "write_file":
            arguments = action.get("arguments") or {}
            path, content = str(arguments.get("path", "")), str(arguments.get("content", ""))
            if not path or len(self.files) >= MAX_FILES and path not in self.files:
                return {"wrote": None, "error": "no path, or the pad is full"}, 0.0, False, False, {}
            self.files[path] = content[:10000]
            return {"wrote": path}, 0.0, False, False, {}
        self.right = parse_answer(action) == self.expected
        self.record_verdict()
        return {"verdict": "right" if self.right else "wrong"}, 1.0 if self.right else 0.0, True, False, {}

    def record_verdict(self):
        self.files[VERDICT] = "right" if self.right else "wrong"

    def verify(self):
        return (1.0, "right answer") if self.right else (0.0, "no right answer")
