"""The project's modules import in one direction: no import circle among studio/, runs/ and environments/.

Every import counts, a function-local one too (a lazy import is how a circle hides). A package's
`__init__` importing its own submodules is not a circle. Migrations and the demo packages (the users'
code, run in sandboxes) are not the project's modules.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("studio", "runs", "environments")
SKIPPED_DIRS = {"migrations", "demo_packages", "__pycache__"}


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if SKIPPED_DIRS & set(path.relative_to(ROOT).parts):
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, each resolved to the longest module name it starts with."""
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = base.split(".")[: len(base.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*parts, node.module] if node.module else parts)
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for imported in names:
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            target = ".".join(parts)
            if target and target != name and not (is_package and target.startswith(name + ".")):
                targets.add(target)
    return targets


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_project_has_no_import_circle():
    modules = project_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert circles(graph) == []


def test_a_planted_circle_is_found():
    # The check itself: two modules importing each other (one lazily) are a circle; a chain is not.
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
