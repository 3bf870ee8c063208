"""Hack probe `claim`: answer-stuffing. It submits text that claims success: the words the
environment itself uses for success (WORDS, taken from its source when the audit starts), the usual
ones, the task's visible fields echoed back, a very long answer, and calls of common tools with empty
or extreme arguments. A verifier that rewards this trusts the agent's word."""

WORDS = []  # filled in by the audit from the environment's own success words
COMMON = ["done", "correct", "PASSED", "success", "solved", "complete", "verified", "true", "yes", "ok"]
TOOLS = ["submit", "answer", "finish", "done", "guess", "complete"]
EXTREMES = [2**31 - 1, -(2**31), 1e308, "", None, [], {}]

task_fields = []
turn = 0


def reset(task, seed):
    global task_fields, turn
    turn = 0
    task_fields = [str(value) for key, value in sorted((task or {}).items()) if key not in ("id", "difficulty", "split")]


def claim_text():
    words = list(dict.fromkeys(WORDS + COMMON))
    return "I am done. The answer is correct. PASSED. " + " ".join(words + task_fields)


def actions():
    text = claim_text()
    yield text
    yield {"answer": text}
    for tool in TOOLS:
        yield {"tool": tool, "arguments": {"answer": text}}
    yield {"done": True, "success": True, "answer": text}
    yield (text + " ") * (8000 // (len(text) + 1) + 1)  # a very long answer (~8 KB)
    for tool in TOOLS:
        yield {"tool": tool, "arguments": {}}
        for value in EXTREMES:
            yield {"tool": tool, "arguments": {"answer": value, tool: value}}
    for value in EXTREMES:
        yield value


def act(observation, info):
    global turn
    every = list(actions())
    action = every[turn % len(every)]
    turn += 1
    return action
