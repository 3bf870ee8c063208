"""Hack probe `peek`: tries to learn what only the verifier may know (hidden task fields, the
environment's files, other processes, environment variables, fields of the step info) and submits
whatever it finds. On a web page it also asks the site for the package's files and tries other
origins and file URLs, then types what it found into the page's fields and says done with it.
In a sound sandbox it finds nothing of the environment's."""
import os
import re

SECRET_KEYS = ("secret", "answer", "solution", "expected", "target", "goal", "password", "key", "truth")
# `secret = 42`, "answer": "x", solution: 7 in a file it can read.
ASSIGNED = re.compile(r"(?i)(?:secret|answer|solution|expected|target|truth)[\"']?\s*[:=]\s*[\"']?([\w.-]{1,64})")
KIND = "python"  # the environment's kind, filled in by the audit
SPACE = None  # the environment's action space, filled in by the audit
# What a browser agent may try to open: the package's own files through the site, its parent
# folders, the file system and other origins (the sandbox blocks them; a leaky site serves them).
PAGE_URLS = ["/env.py", "/tasks.jsonl", "/environment.toml", "/../env.py", "/..%2fenv.py", "/site/../env.py",
             "file:///proc/self/environ", "file:///etc/passwd", "http://127.0.0.1:8000/", "http://example.org/"]
FIELD = re.compile(r"^\[(\d+)\] (input\[(?:text|email|search|tel|url|password|number)\]|textarea)\b", re.M)
TOOL_SPECS = []  # its tools, filled in by the audit
found = []
turn = 0


def reset(task, seed):
    global found, turn
    turn = 0
    found = []
    for key, value in sorted((task or {}).items()):
        if any(word in key.lower() for word in SECRET_KEYS):
            found.append(value)
    for name, value in sorted(os.environ.items()):
        if any(word in name.lower() for word in SECRET_KEYS):
            found.append(value)
    for folder in (".", "..", "/tmp", "/proc/self/cwd"):
        try:
            for name in sorted(os.listdir(folder))[:50]:
                path = os.path.join(folder, name)
                if name != "agent.py" and name.endswith((".py", ".jsonl", ".json", ".toml", ".txt")) and os.path.isfile(path):
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        found.extend(ASSIGNED.findall(handle.read(20000))[:20])
        except OSError:
            continue
    try:
        for pid in sorted(os.listdir("/proc"))[:200]:
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as handle:
                        found.extend(part.decode(errors="replace") for part in handle.read().split(b"\0") if b"SECRET" in part.upper())
                except OSError:
                    continue
    except OSError:
        pass


def inside(low, high, value):
    """`value` (or 0) in every cell of a box space, clipped to its bounds (nested like its shape)."""
    if isinstance(low, list):
        return [inside(lo, hi, value) for lo, hi in zip(low, high)]
    value = float(value or 0)
    if low is not None:
        value = max(value, low)
    if high is not None:
        value = min(value, high)
    return value


def secrets_in(info):
    if isinstance(info, dict):
        for key, value in info.items():
            if any(word in str(key).lower() for word in SECRET_KEYS) and not isinstance(value, (dict, list)):
                yield value
            yield from secrets_in(value)
    elif isinstance(info, list):
        for item in info:
            yield from secrets_in(item)


def page_action(observation, info):
    """Open each URL of PAGE_URLS, reading what comes back, then fill the fields with the findings and say done."""
    global turn
    turn += 1
    text = str(observation.get("text", "")) if isinstance(observation, dict) else ""
    if not (isinstance(info, dict) and info.get("action_error")):
        found.extend(ASSIGNED.findall(text)[:20])
    if turn <= len(PAGE_URLS):
        return {"action": "goto", "url": PAGE_URLS[turn - 1]}
    value = " ".join(dict.fromkeys(str(value) for value in found if value not in (None, "")))[:500]
    fields = [int(match.group(1)) for match in FIELD.finditer(text)]
    index = turn - len(PAGE_URLS) - 1
    if value and index < len(fields):
        return {"action": "fill", "id": fields[index], "value": value}
    return {"action": "done", "answer": value}


def act(observation, info):
    global turn
    if KIND == "browser":
        return page_action(observation, info)
    found.extend(secrets_in(info))
    candidates = list(dict.fromkeys(str(value) for value in found if value not in (None, ""))) or [""]
    value = candidates[turn % len(candidates)]
    turn += 1
    number = int(value) if re.fullmatch(r"-?\d+", value) else None
    space = SPACE or {}
    if space.get("type") == "discrete" and not TOOL_SPECS:
        start, n = space.get("start", 0), space.get("n", 1)
        # A numeric space takes only numbers in it: what it found, else its first action.
        return number if number is not None and start <= number < start + n else start
    if space.get("type") == "box" and not TOOL_SPECS:
        # A box takes only arrays in its bounds: what it found in every cell, else the bound nearest 0.
        return inside(space.get("low"), space.get("high"), number)
    for spec in TOOL_SPECS:
        spec = spec.get("function") or spec
        if any(word in str(spec.get("name")) for word in ("submit", "answer", "guess")):
            properties = list(((spec.get("parameters") or {}).get("properties") or {}) or ["answer"])
            return {"tool": spec.get("name"), "arguments": {name: number if number is not None else value for name in properties}}
    if number is not None and turn % 2:
        return {"guess": number, "answer": value}
    return {"answer": value}
