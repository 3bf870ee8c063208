"""The environment package format: validating, hashing, reading and writing packages.

A package is a mapping of relative POSIX paths to UTF-8 text (binary site assets are kept as
"base64:..." strings). Pure Python: no Django, no database, and package code is never executed.
"""

from __future__ import annotations

import ast
import base64
import datetime
import binascii
import hashlib
import io
import json
import re
import stat
import tarfile
import tomllib
import zipfile
import zlib
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from studio.inputs import MAX_JSON_DEPTH, InputProblem, json_parse, json_problem, text_problem

from .action_surface import action_space_problems, surface_warnings
from environments.sdk.studio_sdk import ACTION_NAME_MAX, ACTION_SPACE_LIMITS

MAX_ARCHIVE_BYTES = 20 * 1024 * 1024
MAX_ARCHIVE_FILES = 2000
# Directory and junk entries are not files, but a hostile archive can still hold millions of them.
MAX_ARCHIVE_ENTRIES = 10 * MAX_ARCHIVE_FILES

MANIFEST_FILE = "environment.toml"
TASKS_FILE = "tasks.jsonl"
# A task's `split`: "train" (the default) or held out ("eval"; "test", as the quality audit first named it).
# Held-out tasks are measured, never practised: no sampler, curriculum or seed-chosen episode serves one.
TASK_SPLITS = ("train", "eval", "test")
HELD_OUT_SPLITS = ("eval", "test")
REQUIREMENTS_FILE = "requirements.txt"
MAX_DEPENDENCIES = 100
KINDS = ("python", "browser")
GYMNASIUM_PREFIX = "gymnasium:"

DEFAULT_LIMITS = {
    "step_timeout_s": 10,
    "episode_timeout_s": 300,
    "verify_timeout_s": 30,
    "memory_mb": 512,
    "observation_mb": 8,
}
# The largest observation (JSON plus raw array bytes) a step may return; over it the step is recorded
# with the reason and the rollout ends errored.
DEFAULT_OBSERVATION_MB = DEFAULT_LIMITS["observation_mb"]
OBSERVATION_MB_RANGE = (0.001, 256)
# How a rollout counts as a success ([success] in environment.toml): one of these rules, or none for
# the default (the verifier's reward > 0, or the total reward > 0 when there is no verifier).
SUCCESS_RULES = ("verifier_at_least", "return_at_least")
# [actions]: what a discrete space's actions are called and which keyboard key plays each (play mode).
ACTIONS_KEYS = ("names", "keys")
DEFAULT_MAX_STEPS = 200
DEFAULT_HIDDEN_TASK_FIELDS = ["answer", "solution"]
MEMORY_MB_RANGE = (64, 8192)
# The most a manifest or a run may ask for: one team's episode must not hold a worker for days,
# and every limit stays a number the sandbox's clocks and counters can hold.
LIMIT_MAXIMA = {
    "step_timeout_s": 3600,
    "episode_timeout_s": 86_400,
    "verify_timeout_s": 3600,
    "max_steps": 100_000,
    "memory_mb": MEMORY_MB_RANGE[1],
}
# How many episodes of one version may share one sandbox process (OpenEnv's
# SUPPORTS_CONCURRENT_SESSIONS), each with its own instance of the entrypoint class; 1: one sandbox each.
DEFAULT_CONCURRENT_SESSIONS = 1
CONCURRENT_SESSIONS_RANGE = (1, 4096)

BINARY_SITE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".ico", ".webp", ".woff", ".woff2")
BASE64_PREFIX = "base64:"

_JUNK_COMPONENTS = {"__MACOSX", ".DS_Store", "__pycache__"}
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
_ENTRYPOINT_RE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)$")
_TOML_LINE_RE = re.compile(r"at line (\d+)")
_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class PackageProblem:
    file: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        return _describe(self.file, self.line, self.reason)


class InvalidPackage(Exception):
    """A package or archive that cannot be accepted; `problems` lists every problem found."""

    def __init__(self, file: str, line: int | None, reason: str, problems=None):
        self.file = file
        self.line = line
        self.reason = reason
        self.problems = list(problems) if problems else [PackageProblem(file, line, reason)]
        super().__init__(_describe(file, line, reason))

    def __reduce__(self):
        # Celery and multiprocessing pickle exceptions; keep every attribute across that.
        return (type(self), (self.file, self.line, self.reason, self.problems))

    @classmethod
    def from_problems(cls, problems: list[PackageProblem]) -> "InvalidPackage":
        first = problems[0]
        return cls(first.file, first.line, first.reason, problems=problems)


def _describe(file: str, line: int | None, reason: str) -> str:
    where = f"{file} line {line}" if line is not None else file
    return f"{where}: {reason}" if where else reason


# --- validation -------------------------------------------------------------------------------


def file_and_folder_clashes(paths) -> list[tuple[str, str]]:
    """(file, inner) pairs where `file` is a file and also a folder holding `inner` ("data" and
    "data/inner.txt"): no sandbox can write both, so every rollout of such a package would fail."""
    names = set(paths)
    clashes = []
    for path in sorted(names):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder in names:
                clashes.append((folder, path))
                break
    return clashes


def file_and_folder_reason(file: str, inner: str) -> str:
    return f"'{file}' is a file and also the folder of '{inner}': rename one of them"


def validate_package(files: dict[str, str]) -> list[PackageProblem]:
    """Every problem in the package, in a stable order (empty when the package is valid)."""
    problems: list[PackageProblem] = [
        PackageProblem(file, None, file_and_folder_reason(file, inner)) for file, inner in file_and_folder_clashes(files)
    ]
    for path in sorted(files):
        reason = _unsafe_path_reason(path) or text_problem(path)
        if reason:
            problems.append(PackageProblem(path, None, reason))
        elif isinstance(files[path], str) and (reason := text_problem(files[path])):
            # PostgreSQL stores neither: refused here, not as a failed write.
            problems.append(PackageProblem(path, None, reason))

    manifest, manifest_problems = _check_manifest(files)
    problems += manifest_problems
    raw = _raw_manifest(files)
    if raw is not None:
        if _entrypoint_is_well_formed(raw.get("entrypoint")):
            problems += _check_entrypoint(files, raw["entrypoint"])
            try:
                problems += [PackageProblem(*found) for found in action_space_problems(files, raw["entrypoint"])]
            except (RecursionError, MemoryError):
                pass  # a module nested too deeply to parse: reported once, by _check_python_files
        if raw.get("kind") == "browser" and not any(p.startswith("site/") for p in files):
            problems.append(
                PackageProblem("site/", None, "a browser environment needs a site/ folder with at least one file")
            )

    problems += _check_dependencies(files, raw)[1]
    problems += _check_python_files(files)
    _, task_problems = _check_tasks(files)
    problems += task_problems
    return problems


def package_warnings(files: dict[str, str]) -> list[PackageProblem]:
    """What a valid package should still fix (shown on its versions): e.g. nothing for a random agent to act with."""
    raw = _raw_manifest(files)
    if raw is None or not _entrypoint_is_well_formed(raw.get("entrypoint")):
        return []
    return [PackageProblem(*found) for found in surface_warnings(files, raw["entrypoint"])]


def ensure_valid_package(files: dict[str, str]) -> None:
    """Raise InvalidPackage (first problem, with `.problems` holding all) unless the package is valid."""
    problems = validate_package(files)
    if problems:
        raise InvalidPackage.from_problems(problems)


def parse_manifest(files: dict[str, str]) -> dict:
    """The parsed environment.toml with defaults filled in; raises InvalidPackage on any problem."""
    manifest, problems = _check_manifest(files)
    if problems:
        raise InvalidPackage.from_problems(problems)
    return manifest


def concurrent_sessions_of(manifest: dict) -> int:
    """How many episodes may share one sandbox of a version (manifests stored before the key was
    introduced have none: one sandbox per episode)."""
    return int(manifest.get("concurrent_sessions") or DEFAULT_CONCURRENT_SESSIONS)


def task_split(task: dict) -> str:
    """"eval" for a held-out task (HELD_OUT_SPLITS), "train" for every other: the one reading of `split`."""
    return "eval" if task.get("split") in HELD_OUT_SPLITS else "train"


def parse_tasks(files: dict[str, str]) -> list[dict]:
    """The tasks of tasks.jsonl in file order; raises InvalidPackage on any problem."""
    tasks, problems = _check_tasks(files)
    if problems:
        raise InvalidPackage.from_problems(problems)
    return tasks


def _unsafe_path_reason(path: str) -> str | None:
    if not path or path.startswith("/") or "\\" in path or re.match(r"^[A-Za-z]:", path):
        return "path must be relative and use forward slashes"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "path must not contain empty, '.' or '..' components"
    return None


def _check_manifest(files: dict[str, str]) -> tuple[dict | None, list[PackageProblem]]:
    text = files.get(MANIFEST_FILE)
    if text is None:
        return None, [PackageProblem(MANIFEST_FILE, None, "missing (every package needs one)")]
    try:
        raw = tomllib.loads(_as_text(text))
    except tomllib.TOMLDecodeError as error:
        match = _TOML_LINE_RE.search(str(error))
        return None, [
            PackageProblem(MANIFEST_FILE, int(match.group(1)) if match else None, f"invalid TOML: {error}")
        ]
    except RecursionError:
        return None, [PackageProblem(MANIFEST_FILE, None, "invalid TOML: nested too deeply")]
    problem_in_values = _manifest_value_problem(raw)
    if problem_in_values:
        return None, [PackageProblem(MANIFEST_FILE, None, problem_in_values)]

    problems: list[PackageProblem] = []

    def problem(key: str, reason: str, table: str | None = None) -> None:
        problems.append(PackageProblem(MANIFEST_FILE, _toml_key_line(text, key, table), reason))

    for key in ("name", "entrypoint"):
        if key not in raw:
            problem(key, f"missing required key '{key}'")
        elif not isinstance(raw[key], str) or not raw[key].strip():
            problem(key, f"'{key}' must be a non-empty string")
    if "kind" not in raw:
        problem("kind", "missing required key 'kind'")
    elif raw["kind"] not in KINDS:
        problem("kind", f"'kind' must be one of {', '.join(map(repr, KINDS))}, not {raw['kind']!r}")

    entrypoint = raw.get("entrypoint")
    if isinstance(entrypoint, str) and entrypoint.strip():
        if not entrypoint.startswith(GYMNASIUM_PREFIX) and not _ENTRYPOINT_RE.match(entrypoint):
            problem("entrypoint", f"entrypoint {entrypoint!r} must look like 'module:Class' or 'gymnasium:<id>'")
        elif entrypoint.startswith(GYMNASIUM_PREFIX) and not entrypoint[len(GYMNASIUM_PREFIX):].strip():
            problem("entrypoint", "entrypoint 'gymnasium:' needs an environment id")
        elif entrypoint.startswith(GYMNASIUM_PREFIX) and (reason := _gymnasium_id_problem(entrypoint)):
            problem("entrypoint", reason)

    if "max_steps" in raw and not (_is_int(raw["max_steps"]) and 0 < raw["max_steps"] <= LIMIT_MAXIMA["max_steps"]):
        problem("max_steps", f"'max_steps' must be an integer from 1 to {LIMIT_MAXIMA['max_steps']}, not {raw['max_steps']!r}")

    if "concurrent_sessions" in raw:
        low, high = CONCURRENT_SESSIONS_RANGE
        value = raw["concurrent_sessions"]
        if not (_is_int(value) and low <= value <= high):
            problem("concurrent_sessions", f"'concurrent_sessions' must be an integer from {low} to {high}, not {value!r}")
        elif value > 1 and raw.get("kind") == "browser":
            # Each browser episode drives its own Chromium; the shared runner is for python environments.
            problem("concurrent_sessions", "a browser environment has one sandbox per episode: 'concurrent_sessions' must be 1")

    limits = raw.get("limits", {})
    if isinstance(limits, dict) and "concurrent_sessions" in limits:
        # TOML puts a key written below [limits] into that table: say where it belongs.
        problem(
            "concurrent_sessions",
            "'concurrent_sessions' belongs at the top level of environment.toml, above [limits]",
            "limits",
        )
    if not isinstance(limits, dict):
        problem("limits", "'limits' must be a table ([limits])")
        limits = {}
    for key in ("step_timeout_s", "episode_timeout_s", "verify_timeout_s"):
        if key in limits and not (_is_number(limits[key]) and 0 < limits[key] <= LIMIT_MAXIMA[key]):
            problem(key, f"limits.{key} must be a positive number of at most {LIMIT_MAXIMA[key]}, not {limits[key]!r}", "limits")
    if "memory_mb" in limits:
        low, high = MEMORY_MB_RANGE
        value = limits["memory_mb"]
        if not (_is_int(value) and low <= value <= high):
            problem("memory_mb", f"limits.memory_mb must be an integer from {low} to {high}, not {value!r}", "limits")

    if "observation_mb" in limits:
        low, high = OBSERVATION_MB_RANGE
        value = limits["observation_mb"]
        if not (_is_number(value) and low <= value <= high):
            problem("observation_mb", f"limits.observation_mb must be a number from {low:g} to {high}, not {value!r}", "limits")

    success = raw.get("success", {})
    if not isinstance(success, dict):
        problem("success", "'success' must be a table ([success])")
    else:
        unknown = sorted(set(success) - set(SUCCESS_RULES))
        if unknown:
            problem(unknown[0], f"[success] knows {' and '.join(SUCCESS_RULES)}, not {', '.join(map(repr, unknown))}", "success")
        elif len(success) > 1:
            problem(SUCCESS_RULES[1], f"[success] takes one rule, either {' or '.join(SUCCESS_RULES)}", "success")
        for key, value in success.items():
            if key in SUCCESS_RULES and not (_is_number(value) and abs(value) < float("inf")):
                problem(key, f"success.{key} must be a number, not {value!r}", "success")

    hidden = raw.get("hidden_task_fields", DEFAULT_HIDDEN_TASK_FIELDS)
    if not (isinstance(hidden, list) and all(isinstance(field, str) for field in hidden)):
        problem("hidden_task_fields", "'hidden_task_fields' must be a list of strings")

    quality = raw.get("quality", {})
    stochastic = quality.get("stochastic") if isinstance(quality, dict) else None
    # Tasks the audit judges by the oracle's pass rate: a list of ids, or id = the pass rate expected at least.
    if stochastic is not None and not (
        (isinstance(stochastic, list) and all(isinstance(task_id, str) for task_id in stochastic))
        or (isinstance(stochastic, dict) and all(_is_number(floor) and 0 <= floor <= 1 for floor in stochastic.values()))
    ):
        problem("stochastic", "quality.stochastic must list task ids, or give each task id the oracle pass rate"
                " expected at least (a number from 0 to 1)", "quality")

    actions = raw.get("actions", {})
    if not isinstance(actions, dict):
        problem("actions", "'actions' must be a table ([actions])")
    else:
        for reason, key in actions_problems(actions):
            problem(key, reason, "actions")

    text_answer = raw.get("text_answer")
    if text_answer is not None and not (isinstance(text_answer, str) and re.fullmatch(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)?", text_answer)):
        # A model's reply in plain text becomes a call of this tool (its "argument", or its first text argument).
        problem("text_answer", f"'text_answer' must name a tool, e.g. \"submit_answer\" or \"submit_answer.answer\", not {text_answer!r}")

    if problems:
        return None, problems
    manifest = dict(raw)
    manifest["max_steps"] = raw.get("max_steps", DEFAULT_MAX_STEPS)
    manifest["concurrent_sessions"] = raw.get("concurrent_sessions", DEFAULT_CONCURRENT_SESSIONS)
    manifest["limits"] = {**DEFAULT_LIMITS, **limits}
    manifest["hidden_task_fields"] = list(hidden)
    manifest["success"] = {key: float(value) for key, value in raw.get("success", {}).items()}
    return manifest, []


def actions_problems(actions: dict) -> list[tuple[str, str]]:
    """(reason, key) for each problem of [actions]: `names` (a discrete space's actions by name, from
    its `start`, in place of the environment's own names) and `keys` (keyboard key -> an action's name
    or number, for play)."""
    found = []
    unknown = sorted(set(actions) - set(ACTIONS_KEYS))
    if unknown:
        found.append((f"[actions] knows {' and '.join(ACTIONS_KEYS)}, not {', '.join(map(repr, unknown))}", unknown[0]))
    names = actions.get("names")
    if names is not None and not (
        isinstance(names, list) and 0 < len(names) <= ACTION_SPACE_LIMITS["values"] and len(set(map(str, names))) == len(names)
        and all(isinstance(name, str) and 0 < len(name) <= ACTION_NAME_MAX for name in names)
    ):
        found.append((f"actions.names must be a list of distinct names of 1 to {ACTION_NAME_MAX} characters", "names"))
    keys = actions.get("keys")
    if keys is not None:
        if not isinstance(keys, dict) or not all(isinstance(key, str) and 0 < len(key) <= 20 for key in keys):
            found.append(('actions.keys must be a table of keyboard keys, e.g. { ArrowUp = "UP", Space = "FIRE" }', "keys"))
        else:
            named = set(names) if isinstance(names, list) else None
            for key, action in keys.items():
                if isinstance(action, bool) or not isinstance(action, (int, str)):
                    found.append((f"actions.keys.{key} must be an action's name or number, not {action!r}", "keys"))
                elif isinstance(action, str) and named is not None and action not in named:
                    found.append((f"actions.keys.{key} names {action!r}, which is not in actions.names", "keys"))
    return found


def _manifest_value_problem(raw: dict) -> str | None:
    """TOML values become the version's manifest (JSON in the database): the same limits as any JSON,
    and no dates or times, which JSON cannot hold."""
    problem = json_problem(raw, max_depth=MAX_JSON_DEPTH)
    if problem is not None:
        return str(problem)
    stack = [raw]
    while stack:
        item = stack.pop()
        for value in item.values() if isinstance(item, dict) else item:
            if isinstance(value, (dict, list)):
                stack.append(value)
            elif isinstance(value, (datetime.date, datetime.time)):
                return f"dates and times cannot be stored (found {value})"
    return None


def _toml_key_line(text: str, key: str, table: str | None) -> int | None:
    """Best-effort line of `key = ...` (inside [table] when given), for pointing at the problem."""
    current_table = None
    key_re = re.compile(rf"^\s*(?:\"{re.escape(key)}\"|{re.escape(key)})\s*=")
    for number, line in enumerate(_as_text(text).splitlines(), start=1):
        header = re.match(r"^\s*\[\s*([^\]]+?)\s*\]", line)
        if header:
            current_table = header.group(1)
            if table is None and current_table == key:
                return number
            continue
        if current_table == table and key_re.match(line):
            return number
    return None


def manifest_key_line(files: dict[str, str], key: str) -> int | None:
    """The line of a top-level key of environment.toml, for messages that point at it."""
    return _toml_key_line(files.get(MANIFEST_FILE, ""), key, None)


def _raw_manifest(files: dict[str, str]) -> dict | None:
    try:
        return tomllib.loads(_as_text(files[MANIFEST_FILE]))
    except (KeyError, tomllib.TOMLDecodeError, RecursionError):
        return None


def _entrypoint_is_well_formed(entrypoint) -> bool:
    if not isinstance(entrypoint, str):
        return False
    if entrypoint.startswith(GYMNASIUM_PREFIX):
        return bool(entrypoint[len(GYMNASIUM_PREFIX):].strip())
    return bool(_ENTRYPOINT_RE.match(entrypoint))


def _check_entrypoint(files: dict[str, str], entrypoint: str) -> list[PackageProblem]:
    line = _toml_key_line(files[MANIFEST_FILE], "entrypoint", None)
    if entrypoint.startswith(GYMNASIUM_PREFIX):
        if _gymnasium_id_problem(entrypoint):
            return []  # reported once, by _check_manifest
        module, env_id = gymnasium_entrypoint(entrypoint)
        if module is not None or _check_dependencies(files, _raw_manifest(files))[0]:
            # Plugin ids and packages with dependencies are checked inside their own dependency
            # environment (environments/dependencies/plugins.py), never in the studio's registry.
            return []
        import gymnasium  # noqa: PLC0415 - heavy, and only gymnasium packages need it

        if env_id not in gymnasium.envs.registry:
            return [PackageProblem(
                MANIFEST_FILE, line,
                f"unknown Gymnasium environment id {env_id!r} (a plugin's id names its module: 'gymnasium:module:EnvId', "
                "with the module's package in 'dependencies')",
            )]
        return []

    module, class_name = entrypoint.split(":")
    candidates = [module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"]
    path = next((candidate for candidate in candidates if candidate in files), None)
    if path is None:
        return [PackageProblem(MANIFEST_FILE, line, f"entrypoint module {candidates[0]} is not in the package")]
    try:
        tree = ast.parse(_as_text(files[path]), filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # reported once, by _check_python_files
    if class_name not in _top_level_names(tree):
        return [PackageProblem(path, None, f"does not define a top-level class {class_name!r} (entrypoint {entrypoint})")]
    return []


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level: classes, plus imports and assignments (aliases)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            names.add(node.target.id)
    return names


def _check_python_files(files: dict[str, str]) -> list[PackageProblem]:
    problems = []
    for path in sorted(files):
        if not path.endswith(".py"):
            continue
        try:
            compile(_as_text(files[path]), path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        except SyntaxError as error:
            problems.append(PackageProblem(path, error.lineno, f"syntax error: {error.msg}"))
        except ValueError as error:  # e.g. a null byte in the source
            problems.append(PackageProblem(path, None, f"cannot be compiled: {error}"))
        except (RecursionError, MemoryError):
            problems.append(PackageProblem(path, None, "cannot be compiled: expressions are nested too deeply"))
    return problems


def _check_tasks(files: dict[str, str]) -> tuple[list[dict], list[PackageProblem]]:
    text = files.get(TASKS_FILE)
    if text is None:
        return [], [PackageProblem(TASKS_FILE, None, "missing (every package needs at least one task)")]
    tasks: list[dict] = []
    problems: list[PackageProblem] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(_as_text(text).splitlines(), start=1):
        if not line.strip():
            continue

        def problem(reason: str) -> None:
            problems.append(PackageProblem(TASKS_FILE, number, reason))

        try:
            task = json_parse(line)
        except json.JSONDecodeError as error:
            problem(f"invalid JSON: {error.msg}")
            continue
        except InputProblem as error:
            problem(f"invalid task: {error}")
            continue
        if not isinstance(task, dict):
            problem(f"a task must be a JSON object, not {type(task).__name__}")
            continue
        task_id = task.get("id")
        if not isinstance(task_id, str) or not task_id:
            problem("a task needs a non-empty string 'id'")
        elif task_id in seen:
            problem(f"duplicate task id {task_id!r} (first on line {seen[task_id]})")
        else:
            seen[task_id] = number
        if "difficulty" in task and not _is_int(task["difficulty"]):
            problem(f"'difficulty' must be an integer, not {task['difficulty']!r}")
        if "split" in task and task["split"] not in TASK_SPLITS:
            problem(f"'split' must be \"train\" or \"eval\" (held out), not {task['split']!r}")
        tasks.append(task)
    if not tasks and not problems:
        problems.append(PackageProblem(TASKS_FILE, None, "has no tasks"))
    return tasks, problems


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_text(value: str) -> str:
    return value if isinstance(value, str) else str(value)


# --- dependencies and plugin entrypoints ---------------------------------------------------------


def gymnasium_entrypoint(entrypoint: str) -> tuple[str | None, str]:
    """(module, env id) of "gymnasium:<id>" or "gymnasium:<module>:<id>" (Gymnasium's own form, whose
    module registers the id on import); module is None for ids Gymnasium knows by itself."""
    spec = entrypoint[len(GYMNASIUM_PREFIX):] if entrypoint.startswith(GYMNASIUM_PREFIX) else entrypoint
    module, colon, env_id = spec.partition(":")
    return (module, env_id) if colon else (None, spec)


def _gymnasium_id_problem(entrypoint: str) -> str | None:
    module, env_id = gymnasium_entrypoint(entrypoint)
    if module is None:
        return None
    if not _MODULE_RE.match(module):
        return f"entrypoint {entrypoint!r}: {module!r} is not a Python module name ('gymnasium:module:EnvId')"
    if not env_id.strip() or ":" in env_id:
        return f"entrypoint {entrypoint!r} must look like 'gymnasium:module:EnvId'"
    return None


def dependencies_of(files: dict[str, str]) -> list[str]:
    """The package's declared requirements (environment.toml `dependencies` and requirements.txt),
    normalized, deduplicated and sorted; raises InvalidPackage on any problem."""
    requirements, problems = _check_dependencies(files, _raw_manifest(files))
    if problems:
        raise InvalidPackage.from_problems(problems)
    return requirements


def normalize_requirement(requirement: Requirement) -> str:
    """One spelling per requirement: canonical name, sorted extras and specifiers, the marker as
    packaging writes it ("MiniGrid >= 3.0 " and "minigrid>=3.0" are the same)."""
    text = canonicalize_name(requirement.name)
    if requirement.extras:
        text += "[" + ",".join(sorted(canonicalize_name(extra) for extra in requirement.extras)) + "]"
    text += ",".join(sorted(str(spec) for spec in requirement.specifier))
    if requirement.marker is not None:
        text += f"; {requirement.marker}"
    return text


def _check_dependencies(files: dict[str, str], raw: dict | None) -> tuple[list[str], list[PackageProblem]]:
    problems: list[PackageProblem] = []
    found: list[str] = []
    declared = (raw or {}).get("dependencies")
    if declared is not None:
        manifest_text = _as_text(files.get(MANIFEST_FILE, ""))
        key_line = _toml_key_line(manifest_text, "dependencies", None)
        if not (isinstance(declared, list) and all(isinstance(item, str) for item in declared)):
            problems.append(PackageProblem(
                MANIFEST_FILE, key_line, "'dependencies' must be a list of requirement strings, e.g. [\"minigrid==3.0.0\"]"
            ))
        else:
            for item in declared:
                line = _string_line(manifest_text, item, key_line)
                requirement, reason = _parse_requirement(item)
                if reason:
                    problems.append(PackageProblem(MANIFEST_FILE, line, reason))
                else:
                    found.append(normalize_requirement(requirement))
    text = files.get(REQUIREMENTS_FILE)
    if text is not None:
        for number, line in enumerate(_as_text(text).splitlines(), start=1):
            item = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not item:
                continue
            if item.startswith("-"):
                problems.append(PackageProblem(
                    REQUIREMENTS_FILE, number,
                    f"options such as {item.split()[0]!r} are not allowed: list one requirement a line "
                    "(the studio chooses the package index)",
                ))
                continue
            requirement, reason = _parse_requirement(item)
            if reason:
                problems.append(PackageProblem(REQUIREMENTS_FILE, number, reason))
            else:
                found.append(normalize_requirement(requirement))
    requirements = sorted(set(found))
    if len(requirements) > MAX_DEPENDENCIES:
        problems.append(PackageProblem(MANIFEST_FILE, None, f"more than {MAX_DEPENDENCIES} dependencies"))
    return requirements, problems


def _parse_requirement(text: str) -> tuple[Requirement | None, str | None]:
    try:
        requirement = Requirement(text)
    except InvalidRequirement as error:
        return None, f"{text!r} is not a pip requirement: {error}"
    if requirement.url:
        # A direct reference (file://, git+https://...) would read the worker's disk or run a build.
        return None, f"{text!r}: direct references ('name @ url') are not allowed; name a release from the index"
    return requirement, None


def _string_line(text: str, value: str, default: int | None) -> int | None:
    """The line of the first TOML string literal holding `value`, at or after `default`."""
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= (default or 0) and (f'"{value}"' in line or f"'{value}'" in line):
            return number
    return default


# --- hashing ----------------------------------------------------------------------------------


def content_hash(files: dict[str, str]) -> str:
    """sha256 over the sorted (path, content) pairs, length-prefixed so boundaries cannot shift."""
    digest = hashlib.sha256()
    digest.update(len(files).to_bytes(8, "big"))
    for path in sorted(files):
        for part in (path.encode("utf-8"), files[path].encode("utf-8")):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


# --- archives ---------------------------------------------------------------------------------


def is_binary_asset(path: str) -> bool:
    """Binary files a package may carry (as "base64:..." values): images and fonts under site/."""
    return path.startswith("site/") and path.lower().endswith(BINARY_SITE_EXTENSIONS)


def read_archive(data: bytes, filename: str) -> dict[str, str]:
    """The files of a .zip or .tar(.gz) package, refusing anything unsafe with InvalidPackage."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise InvalidPackage(filename, None, f"archive is larger than {MAX_ARCHIVE_BYTES // (1024 * 1024)} MB")
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        members = _read_zip_members(data, filename)
    elif data[:2] == b"\x1f\x8b" or data[257:262] == b"ustar":
        members = _read_tar_members(data, filename)
    else:
        raise InvalidPackage(filename, None, "not a zip or tar.gz archive")

    if not members:
        raise InvalidPackage(filename, None, "archive holds no files")
    members = _strip_common_folder(members)

    files: dict[str, str] = {}
    for path, content in members:
        if path in files:
            raise InvalidPackage(path, None, "appears twice in the archive")
        if is_binary_asset(path):
            files[path] = BASE64_PREFIX + base64.b64encode(content).decode("ascii")
            continue
        try:
            files[path] = content.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidPackage(path, None, "not UTF-8 text (binary files are allowed only as images/fonts under site/)")
    for file, inner in file_and_folder_clashes(files):
        raise InvalidPackage(file, None, file_and_folder_reason(file, inner))
    return files


def _member_path(name: str) -> str | None:
    """The cleaned relative path of an archive member, None for junk; raises on unsafe names."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise InvalidPackage(name, None, "absolute path in archive")
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InvalidPackage(name, None, "path traversal ('..') in archive")
    if not parts or any(part in _JUNK_COMPONENTS for part in parts):
        return None
    return "/".join(parts)


class _SizeBudget:
    """Counts uncompressed bytes actually read, so lying size headers cannot smuggle a bomb in."""

    def __init__(self, filename: str):
        self.filename = filename
        self.used = 0
        self.files = 0

    def count_file(self, name: str) -> None:
        self.files += 1
        if self.files > MAX_ARCHIVE_FILES:
            raise InvalidPackage(name, None, f"archive has more than {MAX_ARCHIVE_FILES} files")

    def declare(self, name: str, size: int) -> None:
        if self.used + size > MAX_ARCHIVE_BYTES:
            raise InvalidPackage(name, None, "archive content is larger than 20 MB uncompressed")

    def read(self, name: str, stream) -> bytes:
        chunks = []
        while chunk := stream.read(64 * 1024):
            self.used += len(chunk)
            if self.used > MAX_ARCHIVE_BYTES:
                raise InvalidPackage(name, None, "archive content is larger than 20 MB uncompressed")
            chunks.append(chunk)
        return b"".join(chunks)


def _read_zip_members(data: bytes, filename: str) -> list[tuple[str, bytes]]:
    budget = _SizeBudget(filename)
    members = []
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_ARCHIVE_ENTRIES:
                raise InvalidPackage(filename, None, f"archive has more than {MAX_ARCHIVE_FILES} files")
            for info in infos:
                path = _member_path(info.filename)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise InvalidPackage(info.filename, None, "symbolic links are not allowed in a package")
                if info.is_dir() or path is None:
                    continue
                if info.flag_bits & 0x1:
                    raise InvalidPackage(info.filename, None, "encrypted archive members are not supported")
                budget.count_file(info.filename)
                budget.declare(info.filename, info.file_size)
                with archive.open(info) as stream:
                    members.append((path, budget.read(info.filename, stream)))
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:
        raise InvalidPackage(filename, None, f"corrupt or unsupported zip archive: {error}")
    return members


def _read_tar_members(data: bytes, filename: str) -> list[tuple[str, bytes]]:
    budget = _SizeBudget(filename)
    members = []
    entries = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            while (info := archive.next()) is not None:
                entries += 1
                if entries > MAX_ARCHIVE_ENTRIES:
                    raise InvalidPackage(filename, None, f"archive has more than {MAX_ARCHIVE_FILES} files")
                path = _member_path(info.name)
                if info.issym() or info.islnk():
                    raise InvalidPackage(info.name, None, "symbolic and hard links are not allowed in a package")
                if info.isdir() or path is None:
                    continue
                if not info.isreg():
                    raise InvalidPackage(info.name, None, "devices, FIFOs and other special files are not allowed")
                budget.count_file(info.name)
                budget.declare(info.name, info.size)
                stream = archive.extractfile(info)
                members.append((path, budget.read(info.name, stream)))
    except (tarfile.TarError, zlib.error, EOFError, OSError) as error:
        raise InvalidPackage(filename, None, f"corrupt or unsupported tar archive: {error}")
    return members


def _strip_common_folder(members: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    tops = {path.split("/", 1)[0] for path, _ in members}
    if len(tops) == 1 and all("/" in path for path, _ in members):
        return [(path.split("/", 1)[1], content) for path, content in members]
    return members


def build_zip(files: dict[str, str], root: str) -> bytes:
    """A deterministic zip of the package under folder `root/` (same files -> same bytes)."""
    prefix = f"{root.strip('/')}/" if root.strip("/") else ""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(prefix + path, date_time=_FIXED_ZIP_TIME)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            archive.writestr(info, _file_bytes(path, files[path]))
    return buffer.getvalue()


def _file_bytes(path: str, content: str) -> bytes:
    if is_binary_asset(path) and content.startswith(BASE64_PREFIX):
        try:
            return base64.b64decode(content[len(BASE64_PREFIX):], validate=True)
        except binascii.Error:
            raise InvalidPackage(path, None, "invalid base64 content")
    return content.encode("utf-8")
