"""Reads the question and computes it."""
import re


def act(observation, info):
    a, op, b = re.match(r"What is (-?\d+) ([+*-]) (-?\d+)\?", observation["question"]).groups()
    a, b = int(a), int(b)
    return {"tool": "answer", "arguments": {"answer": a + b if op == "+" else a - b if op == "-" else a * b}}
