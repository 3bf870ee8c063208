"""What an environment offers agents to act with, read statically from its source at commit (package
code is never executed): its `action_space` and `tools`.

- A literal `action_space = {...}` over the SDK's bounds (ACTION_SPACE_LIMITS: a text space of
  max_length 1e8, a box of a billion elements) is a package problem: refused at commit.
- A class that never sets `action_space` or `tools` (nor inherits them from the SDK's browser or
  Gymnasium classes) gets a warning on the version: the built-in random agent has nothing to sample.
Spaces built at run time (assigned in reset) are bounded where they are sampled, inside the agent's
sandbox (studio_sdk.sample_action).
"""

from __future__ import annotations

import ast

from environments.sdk.studio_sdk import action_space_problem

# SDK classes that bring an action surface of their own.
SURFACE_BASES = {"BrowserEnvironment", "GymnasiumEnvironment"}
SURFACE_NAMES = ("action_space", "tools")
NO_SURFACE_WARNING = (
    "{cls} offers no action_space and no tools: the built-in random agent cannot act in it "
    "(scripted and model agents can). Declare an action_space (see the SDK's sample_action) or tools."
)


def _entry_class(files: dict[str, str], entrypoint: str) -> tuple[str, ast.Module, str] | None:
    """(path, parsed module, class name) of a 'module:Class' entrypoint, when it can be read."""
    if not isinstance(entrypoint, str) or ":" not in entrypoint or entrypoint.startswith("gymnasium:"):
        return None
    module, _, class_name = entrypoint.partition(":")
    for path in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
        text = files.get(path)
        if isinstance(text, str):
            try:
                return path, ast.parse(text, filename=path), class_name
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                return None  # reported once, by the package's own Python checks
    return None


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _assignments(cls: ast.ClassDef):
    """(name, value node, line) of `action_space`/`tools` set in the class body or on self in a method."""
    for node in cls.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in SURFACE_NAMES:
                yield target.id, node.value, node.lineno
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if (isinstance(target, ast.Attribute) and target.attr in SURFACE_NAMES
                        and isinstance(target.value, ast.Name) and target.value.id == "self"):
                    yield target.attr, node.value, node.lineno
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in SURFACE_NAMES:
            yield node.name, None, node.lineno  # a property


def _has_surface(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: set[str]) -> bool:
    seen.add(cls.name)
    for _name, value, _line in _assignments(cls):
        if not (isinstance(value, ast.Constant) and value.value is None):
            return True
    for base in cls.bases:
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        if name in SURFACE_BASES:
            return True
        if name in classes and name not in seen and _has_surface(classes[name], classes, seen):
            return True
        if name is not None and name not in classes and name != "Environment" and name != "object":
            return True  # imported from elsewhere: it may bring one; no warning on a guess
    return False


def action_space_problems(files: dict[str, str], entrypoint: str) -> list[tuple[str, int, str]]:
    """(file, line, reason) for each literal action_space of the entry class over the SDK's bounds."""
    entry = _entry_class(files, entrypoint)
    if entry is None:
        return []
    path, tree, class_name = entry
    classes = _classes(tree)
    problems = []
    for cls in classes.values():
        for name, value, line in _assignments(cls):
            if name != "action_space" or value is None:
                continue
            try:
                space = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue  # built at run time: bounded where it is sampled
            if space is None:
                continue
            reason = action_space_problem(space)
            if reason:
                problems.append((path, line, f"action_space of {cls.name}: {reason}"))
    return problems


def surface_warnings(files: dict[str, str], entrypoint: str) -> list[tuple[str, int | None, str]]:
    """(file, line, warning) when the entry class offers no action_space and no tools."""
    entry = _entry_class(files, entrypoint)
    if entry is None:
        return []
    path, tree, class_name = entry
    classes = _classes(tree)
    cls = classes.get(class_name)
    if cls is None or _has_surface(cls, classes, set()):
        return []
    return [(path, cls.lineno, NO_SURFACE_WARNING.format(cls=class_name))]
