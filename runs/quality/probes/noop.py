"""Hack probe `noop`: does nothing useful. It repeats one fixed action: for a tool environment its
answer tool with no arguments (or an empty answer), else the first action of a discrete or choice
action space, else an empty answer.
A verifier that rewards this does not look at the outcome."""

SPACE = None  # the environment's action space, filled in by the audit
TOOL_SPECS = []  # its tools, filled in by the audit
ANSWER_WORDS = ("submit", "answer", "finish", "done")


def fixed_action():
    if TOOL_SPECS:
        names = [(spec.get("function") or spec).get("name") for spec in TOOL_SPECS]
        answer_tools = [name for name in names if name and any(word in name for word in ANSWER_WORDS)]
        return {"tool": answer_tools[0], "arguments": {}} if answer_tools else ""
    space = SPACE or {}
    if space.get("type") == "discrete":
        return space.get("start", 0)
    if space.get("type") == "choice" and space.get("values"):
        return space["values"][0]
    return ""


def reset(task, seed):
    pass


def act(observation, info):
    return fixed_action()
