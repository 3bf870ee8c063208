"""Harbor task directories (github.com/laude-institute/harbor): a version as tasks, tasks as a version.

A Harbor task is a folder: task.toml, instruction.md, environment/ (the Docker build context the agent
works in), tests/test.sh (run after the agent, writes /logs/verifier/reward.txt) and optional
solution/solve.sh. Pure Python on file mappings (path -> text), as environments/package.py is.

Export: one task folder per studio task. The container holds the version's package, the studio SDK and
`studio-env` (studio_episode.py), a shell command that plays the episode and logs its actions; tests/
holds a second copy with the full task (hidden fields included), which replays the log and runs the
version's verifier. A version imported from Harbor exports its original folders unchanged.

Import: each task folder is kept verbatim under harbor/<folder>/; the version's env.py (TERMINAL_ENV)
gives the agent a shell in a scratch folder and runs the task's tests/test.sh as the verifier.
"""
from __future__ import annotations

import io
import json
import re
import tarfile
import tomllib
from pathlib import Path, PurePosixPath

from . import terminal
from .. import package

HARBOR_DIR = "harbor"
TASK_TOML = "task.toml"
INSTRUCTION = "instruction.md"
TEST_SCRIPT = "tests/test.sh"
TASK_SCHEMA_VERSION = "1.4"  # harbor.models.task.config.TaskConfig.schema_version in harbor 0.25.0
ARCHIVE_FILES = ("zip", "tar.gz")
EPISODE_SCRIPT = Path(__file__).with_name("studio_episode.py")
SDK_FILE = Path(__file__).resolve().parents[1] / "sdk" / "studio_sdk" / "__init__.py"
# Fields a task may name its prompt with; the first one present opens instruction.md.
PROMPT_FIELDS = ("instruction", "prompt", "question", "goal", "description")
DIFFICULTY_NAMES = {"easy": 1, "medium": 2, "hard": 3}
_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


class NotExportable(ValueError):
    """A version that cannot become Harbor tasks (a browser environment)."""


# --- export -----------------------------------------------------------------------------------


def harbor_originals(files: dict[str, str]) -> dict[str, dict[str, str]]:
    """The Harbor task folders a version imported from Harbor carries: {folder: {path: text}}."""
    folders: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        parts = path.split("/", 2)
        if len(parts) == 3 and parts[0] == HARBOR_DIR:
            folders.setdefault(parts[1], {})[parts[2]] = text
    return {name: inner for name, inner in folders.items() if TASK_TOML in inner}


def _folder_name(task_id: str, taken: set[str]) -> str:
    name = _NAME_RE.sub("-", task_id).strip("-.") or "task"
    candidate, n = name, 2
    while candidate.lower() in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate.lower())
    return candidate


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def _visible(task: dict, hidden: list[str]) -> dict:
    return {key: value for key, value in task.items() if key not in hidden}


def _instruction(*, name: str, description: str, label: str, task: dict, tools: bool, max_steps: int) -> str:
    prompt = next((str(task[f]) for f in PROMPT_FIELDS if isinstance(task.get(f), str) and task[f].strip()), None)
    lines = [f"# {name}: task {task['id']}", ""]
    if prompt:
        lines += [prompt.strip(), ""]
    if description.strip():
        lines += [description.strip(), ""]
    lines += [
        f"You act in the environment {label} through the `studio-env` command:",
        "",
        "- `studio-env start` begins the episode and prints the first observation"
        + (" and the tools you can call." if tools else "."),
        "- `studio-env step '<action as JSON>'` takes one action and prints the observation, the reward and whether the"
        " episode is over" + (" (a tool call is `{\"tool\": \"<name>\", \"arguments\": {...}}`)." if tools else "."),
        "- `studio-env status` shows the episode so far.",
        "",
        f"The episode ends when the environment says so, or after {max_steps} actions. It is judged from the actions"
        " you took, replayed after you finish.",
    ]
    parameters = {k: v for k, v in task.items() if k not in ("id", *PROMPT_FIELDS)}
    if parameters:
        lines += ["", "Task parameters:", "", "```json", json.dumps(parameters, ensure_ascii=False, indent=2), "```"]
    return "\n".join(lines) + "\n"


def _task_toml(*, slug: str, label: str, content_hash: str, task: dict, description: str, manifest: dict) -> str:
    limits = manifest.get("limits", {})
    episode_s = float(limits.get("episode_timeout_s", package.DEFAULT_LIMITS["episode_timeout_s"]))
    verify_s = float(limits.get("verify_timeout_s", package.DEFAULT_LIMITS["verify_timeout_s"]))
    difficulty = task.get("difficulty")
    harbor_name = _NAME_RE.sub("-", f"{slug}-{task['id']}").strip("-.")
    lines = [
        f"schema_version = {_toml_string(TASK_SCHEMA_VERSION)}",
        f"source = {_toml_string('environment-studio ' + label)}",
        "",
        "[task]",
        f"name = {_toml_string('studio/' + harbor_name)}",
        f"description = {_toml_string(description)}",
        'keywords = ["environment-studio"]',
        "",
        "[metadata]",
        f"studio_version = {_toml_string(label)}",
        f"studio_content_hash = {_toml_string(content_hash)}",
        f"studio_task_id = {_toml_string(str(task['id']))}",
    ]
    if isinstance(difficulty, (int, float)) and not isinstance(difficulty, bool):
        lines.append(f"difficulty = {difficulty}")
    lines += [
        "",
        "[verifier]",
        # The verifier replays the whole episode before it judges it.
        f"timeout_sec = {episode_s + verify_s:.1f}",
        "",
        "[agent]",
        f"timeout_sec = {episode_s:.1f}",
        "",
        "[environment]",
        "build_timeout_sec = 600.0",
        f"memory_mb = {int(limits.get('memory_mb', package.DEFAULT_LIMITS['memory_mb']))}",
    ]
    return "\n".join(lines) + "\n"


def _dockerfile(dependencies: list[str], gymnasium: bool) -> str:
    wanted = list(dependencies) + (["gymnasium"] if gymnasium and not any(d.lower().startswith("gymnasium") for d in dependencies) else [])
    install = f"RUN pip install --no-cache-dir {' '.join(json.dumps(d) for d in wanted)}\n" if wanted else ""
    return (
        "# The studio environment's package and the studio-env command (environment-studio export).\n"
        "FROM python:3.12-slim\n"
        f"{install}"
        "COPY studio /opt/studio\n"
        "RUN chmod +x /opt/studio/studio_episode.py && ln -s /opt/studio/studio_episode.py /usr/local/bin/studio-env\n"
        "WORKDIR /app\n"
    )


TEST_SH = """#!/bin/bash
# Replays the actions the agent took through studio-env (/logs/agent/studio/actions.jsonl) with the full
# task, from this folder's own copy of the environment, and writes the studio verifier's reward.
mkdir -p /logs/verifier
python3 /tests/studio/studio_episode.py verify --task /tests/studio/task.json --reward /logs/verifier/reward.txt
"""


def harbor_task_files(*, slug: str, label: str, content_hash: str, files: dict[str, str], manifest: dict,
                      tasks: list[dict], description: str = "") -> dict[str, str]:
    """The Harbor task folders of a version, {"<folder>/<path>": text}: its original Harbor folders when it
    was imported from Harbor, else one generated folder per task."""
    originals = harbor_originals(files)
    if originals:
        return {f"{folder}/{path}": text for folder, inner in sorted(originals.items()) for path, text in inner.items()}
    if manifest.get("kind") != "python":
        raise NotExportable(f"a {manifest.get('kind')} environment cannot be exported as Harbor tasks: its site and"
                            " browser are not part of a Harbor container")
    hidden = list(manifest.get("hidden_task_fields", package.DEFAULT_HIDDEN_TASK_FIELDS))
    dependencies = package.dependencies_of(files)
    gymnasium = str(manifest.get("entrypoint", "")).startswith(package.GYMNASIUM_PREFIX)
    sdk, episode = SDK_FILE.read_text(encoding="utf-8"), EPISODE_SCRIPT.read_text(encoding="utf-8")
    tools = bool(manifest.get("tools"))
    out: dict[str, str] = {}
    taken: set[str] = set()
    # The container's package has every task without its hidden fields (the agent can read it); tests/ has them.
    visible_files = dict(files)
    visible_files[package.TASKS_FILE] = "".join(json.dumps(_visible(t, hidden), ensure_ascii=False) + "\n" for t in tasks)
    for task in tasks:
        folder = _folder_name(str(task["id"]), taken)
        seed = int(task.get("seed", 0)) if isinstance(task.get("seed"), int) else 0
        out[f"{folder}/{TASK_TOML}"] = _task_toml(slug=slug, label=label, content_hash=content_hash, task=task,
                                                  description=description, manifest=manifest)
        out[f"{folder}/{INSTRUCTION}"] = _instruction(
            name=str(manifest.get("name") or slug), description=description, label=label,
            task=_visible(task, hidden), tools=tools, max_steps=int(manifest.get("max_steps", package.DEFAULT_MAX_STEPS)))
        out[f"{folder}/environment/Dockerfile"] = _dockerfile(dependencies, gymnasium)
        out[f"{folder}/{TEST_SCRIPT}"] = TEST_SH
        for root, task_json, package_files in (
            ("environment/studio", {"task": _visible(task, hidden), "seed": seed}, visible_files),
            ("tests/studio", {"task": task, "seed": seed}, files),
        ):
            out[f"{folder}/{root}/studio_episode.py"] = episode
            out[f"{folder}/{root}/studio_sdk/__init__.py"] = sdk
            out[f"{folder}/{root}/task.json"] = json.dumps(task_json, ensure_ascii=False, indent=2) + "\n"
            for path, text in package_files.items():
                out[f"{folder}/{root}/package/{path}"] = text
    return out


def harbor_archive(files: dict[str, str], *, root: str, file: str) -> bytes:
    """The folders as a deterministic .zip or .tar.gz under `root/` (same files, same bytes)."""
    if file == "zip":
        return package.build_zip(files, root)
    buffer = io.BytesIO()
    import gzip

    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as archive:
        for path in sorted(files):
            data = files[path].encode("utf-8")
            info = tarfile.TarInfo(f"{root}/{path}")
            info.size, info.mode, info.mtime = len(data), 0o755 if path.endswith((".sh", "studio_episode.py")) else 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# --- import -----------------------------------------------------------------------------------


def harbor_task_folders(files: dict[str, str]) -> dict[str, dict[str, str]]:
    """The task folders of an archive's files: the archive itself when task.toml is at its top (one
    task), else each top-level folder. Raises InvalidPackage naming the first thing missing."""
    if TASK_TOML in files:
        return {"": files}
    folders: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        top, _, inner = path.partition("/")
        if not inner:
            raise package.InvalidPackage(TASK_TOML, None, f"missing: a Harbor task folder has task.toml at its top"
                                         f" (beside {path}), or the archive holds task folders, each with its own")
        folders.setdefault(top, {})[inner] = text
    for name, inner in folders.items():
        if TASK_TOML not in inner:
            raise package.InvalidPackage(f"{name}/{TASK_TOML}", None, "missing: every Harbor task folder needs task.toml")
    return folders


def _check_folder(name: str, inner: dict[str, str]) -> dict:
    """The folder's parsed task.toml; InvalidPackage naming the file at fault."""
    prefix = f"{name}/" if name else ""
    try:
        config = tomllib.loads(inner[TASK_TOML])
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"at line (\d+)", str(error))
        raise package.InvalidPackage(prefix + TASK_TOML, int(line.group(1)) if line else None, f"not valid TOML: {error}") from None
    if config.get("steps"):
        raise package.InvalidPackage(prefix + TASK_TOML, None, "multi-step Harbor tasks ([[steps]]) are not supported")
    if not inner.get(INSTRUCTION, "").strip():
        raise package.InvalidPackage(prefix + INSTRUCTION, None, "missing or empty: a Harbor task needs its instruction")
    if TEST_SCRIPT not in inner:
        raise package.InvalidPackage(prefix + TEST_SCRIPT, None, "missing: the studio runs a Harbor task's tests/test.sh"
                                     " as its verifier")
    environment = config.get("environment") if isinstance(config.get("environment"), dict) else {}
    if not environment.get("docker_image") and not any(p.startswith("environment/") for p in inner):
        raise package.InvalidPackage(prefix + "environment/", None, "missing: a Harbor task needs environment/"
                                     " (e.g. environment/Dockerfile) or [environment] docker_image in task.toml")
    return config


def studio_package_from_harbor(files: dict[str, str], *, fallback_name: str) -> dict[str, str]:
    """A studio package holding the Harbor task folders verbatim under harbor/ and the terminal
    environment that plays them. Raises InvalidPackage for a malformed folder."""
    folders = harbor_task_folders(files)
    tasks, names = [], set()
    for folder, inner in sorted(folders.items()):
        config = _check_folder(folder, inner)
        task_name = str((config.get("task") or {}).get("name") or "")
        task_id = _folder_name(folder or task_name.rsplit("/", 1)[-1] or fallback_name, names)
        row = {"id": task_id, "harbor_dir": f"{HARBOR_DIR}/{task_id}", "instruction": inner[INSTRUCTION]}
        difficulty = (config.get("metadata") or {}).get("difficulty")
        if isinstance(difficulty, str) and difficulty.lower() in DIFFICULTY_NAMES:
            row["difficulty"] = DIFFICULTY_NAMES[difficulty.lower()]
        elif isinstance(difficulty, int) and not isinstance(difficulty, bool):
            row["difficulty"] = difficulty
        tasks.append((task_id, inner, row, config))
    if len(tasks) == 1:
        config = tasks[0][3]
        name = str((config.get("task") or {}).get("name") or "").rsplit("/", 1)[-1] or tasks[0][0]
    else:
        name = fallback_name
    out = {
        package.MANIFEST_FILE: terminal.manifest(name=name),
        "env.py": terminal.ENV_PY,
        package.TASKS_FILE: "".join(json.dumps(row, ensure_ascii=False) + "\n" for _, _, row, _ in tasks),
    }
    for task_id, inner, _, _ in tasks:
        for path, text in inner.items():
            out[str(PurePosixPath(HARBOR_DIR, task_id, path))] = text
    return out
