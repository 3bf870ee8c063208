"""Scripted tool-use agent: reads the question, calls the tools, submits the answer.

It never sees the task's hidden `answer`; each question shape is a small plan written as a
generator that yields tool calls and receives their results.
"""

import re

plan = None


def call(tool, **arguments):
    return {"tool": tool, "arguments": arguments}


def solve(question):
    if match := re.match(r"How many (\w+) are in stock in total\?", question):
        listing = yield call("list_items", category=match.group(1))
        total = 0
        for name in listing["items"]:
            item = yield call("lookup_item", name=name)
            total += item["quantity"]
        yield call("submit_answer", answer=str(total))
    elif match := re.match(r"How many (.+) are in stock\?", question):
        item = yield call("lookup_item", name=match.group(1).removesuffix("s"))
        yield call("submit_answer", answer=str(item.get("quantity", "unknown")))
    elif match := re.match(r"In which aisle is the (.+) stored\?", question):
        item = yield call("lookup_item", name=match.group(1))
        yield call("submit_answer", answer=item.get("aisle", "unknown"))
    elif match := re.match(r"Which item in the (\w+) category has the lowest stock\?", question):
        listing = yield call("list_items", category=match.group(1))
        stock = {}
        for name in listing["items"]:
            stock[name] = (yield call("lookup_item", name=name))["quantity"]
        yield call("submit_answer", answer=min(stock, key=stock.get))
    elif match := re.match(r"What is the total stock value of all (\w+)", question):
        listing = yield call("list_items", category=match.group(1))
        value = 0.0
        for name in listing["items"]:
            item = yield call("lookup_item", name=name)
            value += item["quantity"] * item["price"]
        yield call("submit_answer", answer=f"{value:.2f}")
    else:
        yield call("submit_answer", answer="I don't know")


def reset(task, seed):
    global plan
    plan = None


def act(observation, info):
    global plan
    if plan is None or observation.get("last_tool") is None:
        plan = solve(observation["question"])
        return next(plan)
    return plan.send(observation["last_tool_result"])
