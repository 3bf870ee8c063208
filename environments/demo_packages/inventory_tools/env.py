"""Warehouse inventory: the agent answers a question by calling tools, then submits one answer.

Actions are tool calls, {"tool": "lookup_item", "arguments": {"name": "blue widget"}} (OpenAI's
{"name": ..., "arguments": "<json text>"} works too). The episode ends on submit_answer; the
verifier compares the submitted answer with the task's hidden `answer`.
"""

import json
import re

from studio_sdk import Environment, tool

INVENTORY = {
    "blue widget": {"category": "widgets", "quantity": 42, "price": 2.50, "aisle": "A1"},
    "red widget": {"category": "widgets", "quantity": 17, "price": 2.50, "aisle": "A1"},
    "green widget": {"category": "widgets", "quantity": 8, "price": 3.00, "aisle": "A2"},
    "red gadget": {"category": "gadgets", "quantity": 5, "price": 19.99, "aisle": "B3"},
    "silver gadget": {"category": "gadgets", "quantity": 12, "price": 24.50, "aisle": "B4"},
    "hex bolt": {"category": "fasteners", "quantity": 350, "price": 0.10, "aisle": "C1"},
    "wood screw": {"category": "fasteners", "quantity": 1200, "price": 0.05, "aisle": "C1"},
    "wing nut": {"category": "fasteners", "quantity": 275, "price": 0.12, "aisle": "C2"},
    "claw hammer": {"category": "tools", "quantity": 9, "price": 14.00, "aisle": "D1"},
    "torque wrench": {"category": "tools", "quantity": 3, "price": 89.00, "aisle": "D2"},
    "screwdriver set": {"category": "tools", "quantity": 21, "price": 11.50, "aisle": "D1"},
}
CATEGORIES = sorted({item["category"] for item in INVENTORY.values()})


def _string_parameter(name, description):
    return {"type": "object", "properties": {name: {"type": "string", "description": description}}, "required": [name]}


class InventoryTools(Environment):
    tools = [
        tool("lookup_item", "Stock, price and aisle of one item.", _string_parameter("name", "item name, e.g. 'red widget'")),
        tool("list_items", "Names of the items in a category.", _string_parameter("category", f"one of {', '.join(CATEGORIES)}")),
        tool("submit_answer", "Submit the final answer; ends the episode.", _string_parameter("answer", "the answer")),
    ]
    # For random agents: a handful of plausible calls.
    action_space = {
        "type": "choice",
        "values": [
            {"tool": "list_items", "arguments": {"category": category}} for category in CATEGORIES
        ] + [
            {"tool": "lookup_item", "arguments": {"name": name}} for name in sorted(INVENTORY)
        ] + [
            {"tool": "submit_answer", "arguments": {"answer": answer}} for answer in ("42", "B3", "0")
        ],
    }

    def reset(self, task, seed):
        self.seed_rng(seed, task["id"])
        self.question = task["question"]
        self.expected = task.get("answer")
        self.submitted = None
        return self._observation(None, None)

    def step(self, action):
        try:
            name, arguments = parse_tool_call(action)
        except ValueError as error:
            return self._observation(None, {"error": str(error)}), 0.0, False, False, {"valid": False}
        if name == "submit_answer":
            self.submitted = str(arguments.get("answer", ""))
            correct = self._is_correct()
            result = {"submitted": self.submitted}
            return self._observation(name, result), 1.0 if correct else 0.0, True, False, {"valid": True}
        if name == "lookup_item":
            result = lookup_item(str(arguments.get("name", "")))
        elif name == "list_items":
            result = list_items(str(arguments.get("category", "")))
        else:
            result = {"error": f"unknown tool {name!r}; tools are lookup_item, list_items, submit_answer"}
        return self._observation(name, result), 0.0, False, False, {"valid": "error" not in result}

    def verify(self):
        if self.submitted is None:
            return 0.0, "no answer submitted"
        if self._is_correct():
            return 1.0, f"answer {self.submitted!r} is correct"
        return 0.0, f"answer {self.submitted!r} is wrong (expected {self.expected!r})"

    def _is_correct(self):
        return self.expected is not None and answers_match(self.submitted, str(self.expected))

    def _observation(self, tool_name, result):
        return {"question": self.question, "last_tool": tool_name, "last_tool_result": result}


def lookup_item(name):
    key = normalize(name)
    item = INVENTORY.get(key) or INVENTORY.get(key.removesuffix("s"))
    if item is None:
        return {"error": f"no item named {name!r}"}
    return {"name": key if key in INVENTORY else key.removesuffix("s"), **item}


def list_items(category):
    key = normalize(category)
    names = sorted(name for name, item in INVENTORY.items() if item["category"] in (key, key + "s"))
    if not names:
        return {"error": f"unknown category {category!r}; categories are {', '.join(CATEGORIES)}", "items": []}
    return {"category": key, "items": names}


def parse_tool_call(action):
    if not isinstance(action, dict):
        raise ValueError('an action is a tool call: {"tool": NAME, "arguments": {...}}')
    name = action.get("tool") or action.get("name")
    arguments = action.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            raise ValueError("arguments are not valid JSON")
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ValueError('an action is a tool call: {"tool": NAME, "arguments": {...}}')
    return name, arguments


def normalize(text):
    return re.sub(r"\s+", " ", str(text)).strip().strip(".").lower()


def answers_match(submitted, expected):
    """Case, spacing, a trailing period, '$' and thousands separators do not matter; numbers compare by value."""
    left, right = (normalize(value).replace("$", "").replace(",", "").strip() for value in (submitted, expected))
    try:
        return abs(float(left) - float(right)) < 1e-9
    except ValueError:
        return left == right
