"""Fills the sign-up form from the task's fields, submits, and confirms on a review page."""

import re

fields = {}
filled = []


def reset(task, seed):
    global fields, filled
    fields = dict(task.get("fields") or {})
    filled = []


def element_id(text, pattern):
    match = re.search(r"^\[(\d+)\] " + pattern, text, re.M)
    return int(match.group(1)) if match else None


def act(observation, info):
    text = observation["text"]
    if observation["title"] == "Welcome":
        return {"action": "done", "answer": "signed up"}
    if observation["title"].startswith("Review"):
        return {"action": "click", "id": element_id(text, r'button "Confirm"')}
    for name in ("name", "email"):
        if name in fields and name not in filled:
            filled.append(name)
            return {"action": "fill", "id": element_id(text, r"input\[\w+\] name=" + name), "value": fields[name]}
    for name in ("country", "plan"):
        if name in fields and name not in filled:
            filled.append(name)
            return {"action": "select", "id": element_id(text, "select name=" + name), "value": fields[name]}
    if fields.get("newsletter") == "yes" and "newsletter" not in filled:
        filled.append("newsletter")
        return {"action": "click", "id": element_id(text, "checkbox name=newsletter")}
    return {"action": "click", "id": element_id(text, r'button "Sign up"')}
