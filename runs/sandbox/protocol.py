"""The sandbox protocol: newline-delimited JSON between the worker and the runner inside a sandbox.

Both sides import this one module: the runner loads it stand-alone (Debian's /usr/bin/python3, no
Django, no third-party packages), the host as `runs.sandbox.protocol`. Keep it standard-library only.

Requests (worker -> runner), one JSON object a line:
    {"op": "load", "mode": "env"|"agent", "entrypoint": "env:MyEnv", "limits": {...},
     "seed_secret": "..."}                              env mode only: the version's seed secret
    {"op": "reset", "task": {...}, "seed": 0}
    {"op": "step", "action": ...}                       env mode
    {"op": "verify"}                                    env mode
    {"op": "act", "observation": ..., "info": {...}}    agent mode; "space": {"action_space", "tools"}
                                                        for an agent module with observe_space()
    {"op": "end", "episode": "e1"}                      env mode: close and drop that episode's instance
    {"op": "close"}
Responses (runner -> worker):
    {"ok": true, "result": ...}
    {"ok": false, "error": "ValueError: bad action (env.py line 12)", "kind": "exception"}

Shared sandboxes (environment.toml `concurrent_sessions` > 1): reset, step and verify may carry
"episode": "<id>"; the runner then keeps one instance of the entrypoint class per episode id, made on
that episode's first reset, until "end". Requests without "episode" use the instance made at load.
"""

import json

OPS = ("load", "reset", "step", "verify", "act", "end", "close")
MODES = ("env", "agent")

# Error kinds a runner may answer with.
KIND_EXCEPTION = "exception"  # user code raised; the sandbox is still usable
KIND_CONTRACT = "contract"  # user code returned something the contract does not allow
KIND_PROTOCOL = "protocol"  # a malformed or out-of-order request
KIND_LIMIT = "limit"  # a result too large to send

MAX_OBSERVATION_BYTES = 256 * 1024
MAX_INFO_BYTES = 256 * 1024
# Whole-line ceiling: a request or response longer than this is a protocol violation.
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_EPISODE_ID_CHARS = 200
EPISODE_OPS = ("reset", "step", "verify", "end")


class ProtocolError(ValueError):
    """A line that is not a valid protocol message."""


def encode(message):
    """One message as a JSON line (bytes, newline-terminated)."""
    line = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    if len(line) >= MAX_LINE_BYTES:
        raise ProtocolError(f"message is {len(line)} bytes, over the {MAX_LINE_BYTES} byte line limit")
    return line + b"\n"


def decode(line):
    """Parse one JSON line into a dict; raise ProtocolError on anything else."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"line is {len(line)} bytes, over the {MAX_LINE_BYTES} byte line limit")
    try:
        message = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        preview = bytes(line[:80]) if isinstance(line, (bytes, bytearray)) else line[:80]
        raise ProtocolError(f"not a JSON line: {exc} (starts with {preview!r})") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {type(message).__name__}")
    return message


def request(op, **fields):
    if op not in OPS:
        raise ProtocolError(f"unknown op {op!r}")
    return {"op": op, **fields}


def ok(result=None):
    return {"ok": True, "result": result}


def error(message, kind=KIND_EXCEPTION):
    return {"ok": False, "error": str(message), "kind": kind}


def json_size(value):
    """Bytes the value takes once encoded (the value must already be JSON-compatible)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8"))


def truncation_note(size, limit, what="observation"):
    return {
        "truncated": True,
        "note": f"{what} was {size} bytes, over the {limit // 1024} KB limit",
    }


def bounded(value, limit=MAX_OBSERVATION_BYTES, what="observation"):
    """The value itself, or a truncation note when its JSON is over the limit."""
    size = json_size(value)
    if size > limit:
        return truncation_note(size, limit, what)
    return value
