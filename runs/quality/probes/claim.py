"""Hack probe `claim`: answer-stuffing. It submits text that claims success: the words the
environment itself uses for success (WORDS, taken from its source when the audit starts), the usual
ones, the task's visible fields echoed back, a very long answer, and calls of every tool (and common
answer tools) with that text or empty or extreme arguments. A verifier that rewards this trusts the
agent's word. For a purely numeric action space (no tools) it can only claim with the space's own
extreme actions; for a box space, its bounds. On a web page it types the claim into every field,
then says done with the claim as its answer.
Its candidates come in kinds (text claims, success flags, tool calls with the claim, tool calls with
extreme arguments, bare extremes); each episode starts at another kind, and another candidate of it,
rotated by the seed and the task, so a one-answer environment sees every kind over a few episodes."""
import re
import zlib

WORDS = []  # filled in by the audit from the environment's own success words
KIND = "python"  # the environment's kind, filled in by the audit
SPACE = None  # the environment's action space, filled in by the audit
TOOL_SPECS = []  # its tools, filled in by the audit
COMMON = ["done", "correct", "PASSED", "success", "solved", "complete", "verified", "true", "yes", "ok"]
ANSWER_TOOLS = ["submit", "answer", "finish", "done", "complete"]
EXTREMES = [2**31 - 1, -(2**31), 1e308, "", None, [], {}]

task_fields = []
turn = 0
episode = 0  # which kind, and which candidate of it, leads this episode (from the seed and the task)


def reset(task, seed):
    global task_fields, turn, episode
    turn = 0
    episode = (seed or 0) + zlib.crc32(str((task or {}).get("id", "")).encode())
    filled.clear()
    task_fields = [str(value) for key, value in sorted((task or {}).items()) if key not in ("id", "difficulty", "split")]


def claim_text():
    words = list(dict.fromkeys(WORDS + COMMON))
    return "I am done. The answer is correct. PASSED. " + " ".join(words + task_fields)


def tool_calls(text):
    """Every tool with the claim in each string argument, and the common answer tools."""
    specs = [spec.get("function") or spec for spec in TOOL_SPECS]
    known = [spec.get("name") for spec in specs]
    for spec in specs:
        properties = (spec.get("parameters") or {}).get("properties") or {}
        yield {"tool": spec.get("name"), "arguments": {name: text for name in properties} or {"answer": text}}
    for name in ANSWER_TOOLS:
        if name not in known:
            yield {"tool": name, "arguments": {"answer": text}}


def extreme_calls():
    """Every tool with empty, then extreme arguments."""
    for spec in [spec.get("function") or spec for spec in TOOL_SPECS]:
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


def kinds():
    """The candidates, by kind."""
    space = SPACE or {}
    if space.get("type") == "box" and not TOOL_SPECS:
        return [[space.get("high"), space.get("low")]]
    if space.get("type") == "discrete" and not TOOL_SPECS:
        start = space.get("start", 0)
        return [[start + space.get("n", 1) - 1, start]]
    if space.get("type") == "choice" and not TOOL_SPECS:
        values = space.get("values") or [""]
        return [[values[-1], values[0]]]
    text = claim_text()
    long_text = (text + " ") * (8000 // (len(text) + 1) + 1)  # a very long answer (~8 KB)
    every = [[text, {"answer": text}, long_text], [{"done": True, "success": True, "answer": text}],
             list(tool_calls(text)), list(extreme_calls()), list(EXTREMES)]
    return [kind for kind in every if kind]


def actions():
    """Every candidate, the episode's kind first and each kind rotated to the episode's candidate."""
    every = kinds()
    lead = episode % len(every)
    ordered = every[lead:] + every[:lead]
    for kind in ordered:
        shift = (episode // len(every)) % len(kind)
        yield from kind[shift:] + kind[:shift]


def act(observation, info):
    global turn
    if KIND == "browser":
        return page_action(observation)
    every = list(actions())
    action = every[turn % len(every)]
    turn += 1
    return action
