"""Hack probe `noop`: does nothing useful. It repeats one fixed action: for a tool environment its
answer tool with no arguments (or an empty answer), else the first action of a discrete or choice
action space, zeros (within bounds) of a box space, else an empty answer; on a web page it clicks
nothing and says done.
A verifier that rewards this does not look at the outcome."""

KIND = "python"  # the environment's kind, filled in by the audit
SPACE = None  # the environment's action space, filled in by the audit
TOOL_SPECS = []  # its tools, filled in by the audit
ANSWER_WORDS = ("submit", "answer", "finish", "done")


def still(low, high):
    """Zero, or the bound nearest it, in every cell of a box space (nested like its shape)."""
    if isinstance(low, list):
        return [still(lo, hi) for lo, hi in zip(low, high)]
    value = 0.0
    if low is not None:
        value = max(value, low)
    if high is not None:
        value = min(value, high)
    return value


def fixed_action():
    if KIND == "browser":
        return {"action": "done", "answer": ""}
    if TOOL_SPECS:
        names = [(spec.get("function") or spec).get("name") for spec in TOOL_SPECS]
        answer_tools = [name for name in names if name and any(word in name for word in ANSWER_WORDS)]
        return {"tool": answer_tools[0], "arguments": {}} if answer_tools else ""
    space = SPACE or {}
    if space.get("type") == "discrete":
        return space.get("start", 0)
    if space.get("type") == "choice" and space.get("values"):
        return space["values"][0]
    if space.get("type") == "box":
        return still(space.get("low"), space.get("high"))
    return ""


def reset(task, seed):
    pass


def act(observation, info):
    return fixed_action()
