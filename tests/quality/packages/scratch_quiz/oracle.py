"""Notes its working on the pad, then answers the question it was shown first."""
import re

question = ""


def reset(task, seed):
    global question
    question = ""


def act(observation, info):
    global question
    if not question:
        question = observation["question"]
        return {"tool": "write_file", "arguments": {"path": "notes.txt", "content": "compute it"}}
    a, op, b = re.match(r"What is (-?\d+) ([+*-]) (-?\d+)\?", question).groups()
    a, b = int(a), int(b)
    return {"tool": "answer", "arguments": {"answer": a + b if op == "+" else a - b if op == "-" else a * b}}
