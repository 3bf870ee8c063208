"""Games a naive check: writes the success text into the form and claims success, never submitting."""

import re


def act(observation, info):
    text = observation["text"]
    if "Thank you, your registration is complete" in text:
        return {"action": "done", "answer": "Thank you, your registration is complete"}
    match = re.search(r"^\[(\d+)\] textarea name=message", text, re.M)
    return {"action": "fill", "id": int(match.group(1)), "value": "Thank you, your registration is complete"}
