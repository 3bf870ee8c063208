"""What any text or JSON value coming from outside must satisfy before the studio builds anything
from it: no NUL characters or unpaired surrogates (PostgreSQL cannot store them), no NaN or infinity,
integers that fit a bigint, bounded nesting. Pure Python: the request gate (studio/middleware.py)
and the package format (environments/package.py) share these definitions.
"""
import json
import math

MAX_JSON_DEPTH = 64
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1


class InputProblem(ValueError):
    """`field` (a dotted path, or None for the whole input) holds a value the studio refuses."""

    def __init__(self, field: str | None, reason: str):
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


def text_problem(text: str) -> str | None:
    """Why this text cannot be stored, or None."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired surrogate (not valid Unicode)"
    return None


def _join(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]" if path else f"[{key}]"
    return f"{path}.{key}" if path else str(key)


def json_problem(value, *, max_depth: int = MAX_JSON_DEPTH, path: str = "") -> InputProblem | None:
    """The first part of a parsed JSON value the studio refuses, without recursion (a hostile value may
    be nested a million deep)."""
    stack = [(value, path, 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                return InputProblem(where or None, f"is nested more than {max_depth} levels deep")
            if isinstance(item, dict):
                for key, child in item.items():
                    reason = text_problem(key) if isinstance(key, str) else None
                    if reason:
                        return InputProblem(where or None, f"has a key that {reason}")
                    stack.append((child, _join(where, key), depth + 1))
            else:
                stack.extend((child, _join(where, position), depth + 1) for position, child in enumerate(item))
        elif isinstance(item, str):
            reason = text_problem(item)
            if reason:
                return InputProblem(where or None, reason)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not BIGINT_MIN <= item <= BIGINT_MAX:
                return InputProblem(where or None, "is an integer outside -2^63 .. 2^63-1")
        elif isinstance(item, float) and not math.isfinite(item):
            return InputProblem(where or None, "is not a finite number (NaN and infinity are refused)")
    return None


def _refuse_constant(name: str):
    raise InputProblem(None, f"{name} is not a JSON number (NaN and infinity are refused)")


def json_parse(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, path: str = ""):
    """Parse strict JSON (no NaN or Infinity) and refuse with InputProblem what json_problem refuses;
    json.JSONDecodeError for text that is not JSON at all."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InputProblem(path or None, f"is nested more than {max_depth} levels deep") from None
    except InputProblem as exc:
        raise InputProblem(path or None, exc.reason) from None
    problem = json_problem(value, max_depth=max_depth, path=path)
    if problem is not None:
        raise problem
    return value
