"""Reads the numbers and sorts their positions by value."""
import re


def act(observation, info):
    pairs = [(int(value), int(position)) for position, value in re.findall(r"(\d+): (-?\d+)", str(observation))]
    return {"tool": "submit_order", "arguments": {"order": [position for _value, position in sorted(pairs)]}}
