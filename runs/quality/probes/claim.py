"""Hack probe `claim`: answer-stuffing. It submits text that claims success: the words the
environment itself uses for success (WORDS, taken from its source when the audit starts), the usual
ones, the task's visible fields echoed back, a very long answer, and calls of every tool (and common
answer tools) with that text or empty or extreme arguments. A verifier that rewards this trusts the
agent's word. For a purely numeric action space (no tools) it can only claim with the space's own
extreme actions; for a box space, its bounds. On a web page it types the claim into every field,
then says done with the claim as its answer."""
import re

WORDS = []  # filled in by the audit from the environment's own success words
KIND = "python"  # the environment's kind, filled in by the audit
SPACE = None  # the environment's action space, filled in by the audit
TOOL_SPECS = []  # its tools, filled in by the audit
COMMON = ["done", "correct", "PASSED", "success", "solved", "complete", "verified", "true", "yes", "ok"]
ANSWER_TOOLS = ["submit", "answer", "finish", "done", "complete"]
EXTREMES = [2**31 - 1, -(2**31), 1e308, "", None, [], {}]

task_fields = []
turn = 0


def reset(task, seed):
    global task_fields, turn
    turn = 0
    filled.clear()
    task_fields = [str(value) for key, value in sorted((task or {}).items()) if key not in ("id", "difficulty", "split")]


def claim_text():
    words = list(dict.fromkeys(WORDS + COMMON))
    return "I am done. The answer is correct. PASSED. " + " ".join(words + task_fields)


def tool_calls(text):
    """Every tool with the claim in each string argument, then with empty and extreme arguments."""
    specs = [spec.get("function") or spec for spec in TOOL_SPECS]
    known = [spec.get("name") for spec in specs]
    for spec in specs:
        properties = (spec.get("parameters") or {}).get("properties") or {}
        yield {"tool": spec.get("name"), "arguments": {name: text for name in properties} or {"answer": text}}
    for name in ANSWER_TOOLS:
        if name not in known:
            yield {"tool": name, "arguments": {"answer": text}}
    for spec in specs:
        properties = (spec.get("parameters") or {}).get("properties") or {}
        yield {"tool": spec.get("name"), "arguments": {}}
        for value in EXTREMES:
            yield {"tool": spec.get("name"), "arguments": {name: value for name in properties}}


# A field of a browser observation's text view: "[3] input[email] ...", "[7] textarea ...".
FIELD = re.compile(r"^\[(\d+)\] (input\[(?:text|email|search|tel|url|password)\]|textarea)\b", re.M)
filled = set()


def page_action(observation):
    """Fill each field of the page once with the claim, then claim success."""
    text = observation.get("text", "") if isinstance(observation, dict) else ""
    for match in FIELD.finditer(str(text)):
        element = int(match.group(1))
        if element not in filled:
            filled.add(element)
            return {"action": "fill", "id": element, "value": claim_text()[:500]}
    return {"action": "done", "answer": claim_text()}


def actions():
    space = SPACE or {}
    if space.get("type") == "box" and not TOOL_SPECS:
        yield from (space.get("high"), space.get("low"))
        return
    if space.get("type") == "discrete" and not TOOL_SPECS:
        start = space.get("start", 0)
        yield from (start + space.get("n", 1) - 1, start)
        return
    if space.get("type") == "choice" and not TOOL_SPECS:
        values = space.get("values") or [""]
        yield from (values[-1], values[0])
        return
    text = claim_text()
    yield text
    yield {"answer": text}
    yield from tool_calls(text)
    yield {"done": True, "success": True, "answer": text}
    yield (text + " ") * (8000 // (len(text) + 1) + 1)  # a very long answer (~8 KB)
    for value in EXTREMES:
        yield value


def act(observation, info):
    global turn
    if KIND == "browser":
        return page_action(observation)
    every = list(actions())
    action = every[turn % len(every)]
    turn += 1
    return action
