"""Building dependency environments on disk: one content-addressed, read-only directory per
requirement set, made with uv (wheels only: no package's build code runs on the worker).

No Django models here: the services (services.py) record what a build did. A directory
`<root>/<sha256>/` exists only when its build succeeded: a build writes into a temporary sibling
and renames it into place, under a per-set file lock, so two workers on one host never build the
same set twice and nobody ever sees half an environment.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITE_PACKAGES = "site-packages"
REQUIREMENTS_NAME = "requirements.txt"
LOG_NAME = "build.log"
LOCKS = ".locks"
FORMAT = 1  # bump when the layout of a built directory changes: every set then builds afresh
# The SDK and the runner import these; a dependency environment holds the studio's own releases.
BASE_PACKAGES = ("numpy", "gymnasium")
MAX_LOG_CHARS = 200_000
MAX_ERROR_CHARS = 2_000
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_URL_CREDENTIALS_RE = re.compile(r"(\w+://)[^/\s:@]+(?::[^/\s@]*)?@")


@dataclasses.dataclass(frozen=True)
class RequirementSet:
    """What a dependency environment is built from; its sha256 names the directory."""

    requirements: tuple[str, ...]  # normalized (environments.package.normalize_requirement), sorted
    base: tuple[str, ...]
    python: str  # "3.11-x86_64" of the sandbox interpreter

    @property
    def sha256(self) -> str:
        document = {"format": FORMAT, "requirements": list(self.requirements), "base": list(self.base), "python": self.python}
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()

    @property
    def all_requirements(self) -> list[str]:
        return [*self.requirements, *self.base]


@functools.lru_cache(maxsize=1)
def base_requirements() -> tuple[str, ...]:
    """The studio's own numpy and Gymnasium, pinned: sandboxed code sees the same releases as today."""
    return tuple(f"{name}=={importlib.metadata.version(name)}" for name in BASE_PACKAGES)


@functools.lru_cache(maxsize=8)
def interpreter_tag(python: str) -> str:
    """'3.11-x86_64' for an interpreter: wheels built for it work for any of the same minor version."""
    out = subprocess.run(
        [python, "-I", "-c", "import platform, sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}-{platform.machine()}')"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    return out.stdout.strip()


def requirement_set(requirements, *, python: str) -> RequirementSet:
    return RequirementSet(requirements=tuple(sorted(set(requirements))), base=base_requirements(), python=interpreter_tag(python))


# -- the package index, as pip is configured --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class IndexConfig:
    """Where packages come from; from pip's own configuration unless the settings name an index."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    constraints: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    cert: str | None = None
    timeout_s: int | None = None

    def uv_arguments(self) -> list[str]:
        args = []
        if self.no_index:
            args.append("--no-index")
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        for path in self.constraints:
            args += ["--constraint", path]
        for host in self.trusted_hosts:
            args += ["--allow-insecure-host", host]
        return args

    def uv_environment(self) -> dict[str, str]:
        env = {}
        if self.cert:
            env["SSL_CERT_FILE"] = self.cert
        if self.timeout_s:
            env["UV_HTTP_TIMEOUT"] = str(self.timeout_s)
        return env


def pip_index_config(python: str = sys.executable) -> IndexConfig:
    """pip's index settings (its config files and PIP_* variables, through `pip config list`),
    so a build finds packages where `pip install` would: local mirrors included."""
    try:
        out = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return IndexConfig()
    # Later scopes win, as in pip: [global] < [install] < PIP_* environment variables.
    ranked: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        match = re.match(r"^([^.]*)\.([\w-]+)='(.*)'$", line.strip())
        if not match:
            continue
        scope, key, value = match.groups()
        rank = {"global": 0, "install": 1, ":env:": 2}.get(scope)
        if rank is not None and (key not in ranked or rank >= ranked[key][0]):
            ranked[key] = (rank, value)
    values = {key: value for key, (_, value) in ranked.items()}

    def many(key):
        return tuple(values.get(key, "").split())

    timeout = values.get("timeout") or values.get("default-timeout")
    return IndexConfig(
        index_url=values.get("index-url") or None,
        extra_index_urls=many("extra-index-url"),
        find_links=many("find-links"),
        no_index=values.get("no-index", "").lower() in ("1", "true", "yes", "on"),
        constraints=many("constraint"),
        trusted_hosts=many("trusted-host"),
        cert=values.get("cert") or None,
        timeout_s=int(float(timeout)) if timeout and timeout.replace(".", "", 1).isdigit() else None,
    )


# -- building ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class BuildResult:
    ok: bool
    path: Path
    log: str
    error: str = ""
    seconds: float = 0.0
    cached: bool = False  # the directory was already there: nothing was built


def built_path(root: Path, sha256: str) -> Path | None:
    """The set's site-packages directory when its build is complete on this host, else None."""
    site = Path(root) / sha256 / SITE_PACKAGES
    return site if site.is_dir() else None


def uv_binary() -> str:
    from uv import find_uv_bin  # noqa: PLC0415 - the pinned `uv` package ships its binary

    return find_uv_bin()


def build(
    requirement_set: RequirementSet,
    *,
    root: Path,
    python: str,
    index: IndexConfig,
    timeout_s: float = 900.0,
) -> BuildResult:
    """Make `<root>/<sha>/site-packages` for the set unless it is there; never touches other sets."""
    root = Path(root)
    sha = requirement_set.sha256
    final = root / sha
    started = time.monotonic()
    existing = built_path(root, sha)
    if existing is not None:
        return BuildResult(True, existing, _read_log(final), cached=True, seconds=time.monotonic() - started)
    (root / LOCKS).mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # sandbox uids traverse it to their own set
    with open(root / LOCKS / f"{sha}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker building the same set: wait for it
        existing = built_path(root, sha)
        if existing is not None:
            return BuildResult(True, existing, _read_log(final), cached=True, seconds=time.monotonic() - started)
        return _build_locked(requirement_set, root=root, final=final, python=python, index=index,
                             timeout_s=timeout_s, started=started)


def _build_locked(requirement_set, *, root, final, python, index, timeout_s, started) -> BuildResult:
    work = Path(tempfile.mkdtemp(prefix=f".build-{requirement_set.sha256[:12]}-", dir=root))
    try:
        (work / REQUIREMENTS_NAME).write_text("\n".join(requirement_set.all_requirements) + "\n")
        argv = [
            uv_binary(), "pip", "install",
            "--no-config",  # only what is passed here: pip's index settings, never a stray uv.toml
            "--target", str(work / SITE_PACKAGES),
            "--python", python,
            "--only-binary", ":all:",  # wheels only: no sdist's build code runs on the worker
            "--index-strategy", "unsafe-best-match",  # as pip: the best release over all indexes
            "--link-mode", "copy",  # the result is made read-only; uv's cache must stay writable
            "--compile-bytecode",  # the sandbox cannot write __pycache__: compile once, here
            "--no-progress",
            *index.uv_arguments(),
            "--requirement", str(work / REQUIREMENTS_NAME),
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "NO_COLOR": "1",
            "UV_NO_PROGRESS": "1",
            "UV_HTTP_RETRIES": "1",
            **({"UV_CACHE_DIR": os.environ["UV_CACHE_DIR"]} if os.environ.get("UV_CACHE_DIR") else {}),
            **index.uv_environment(),
        }
        header = _clean("$ " + " ".join(argv) + "\n")
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=work)
        except subprocess.TimeoutExpired as exc:
            log = header + _clean((exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else exc.stderr or "")
            return BuildResult(False, final, log[-MAX_LOG_CHARS:], error=f"the build took longer than {timeout_s:.0f} s",
                               seconds=time.monotonic() - started)
        log = (header + _clean(proc.stdout) + _clean(proc.stderr))[-MAX_LOG_CHARS:]
        if proc.returncode != 0:
            return BuildResult(False, final, log, error=build_error_summary(_clean(proc.stderr)),
                               seconds=time.monotonic() - started)
        (work / LOG_NAME).write_text(log)
        _make_read_only(work)
        os.rename(work, final)  # atomic: the set is there whole, or not at all
        return BuildResult(True, final / SITE_PACKAGES, log, seconds=time.monotonic() - started)
    finally:
        if work.exists():
            _remove_tree(work)


def build_error_summary(stderr: str) -> str:
    """The part of uv's output that says what went wrong (from its first 'error:' or '×' line)."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    for number, line in enumerate(lines):
        if line.lstrip().startswith(("error:", "×")):
            text = "\n".join(lines[number:])
            break
    else:
        text = "\n".join(lines[-15:]) or "uv failed without saying why"
    text = re.sub(r"^\s*(error:|×)\s*", "", text)
    return text[:MAX_ERROR_CHARS]


def _clean(text: str | None) -> str:
    """Without colour codes, and without the credentials of an index URL (the log is shown to users)."""
    return _URL_CREDENTIALS_RE.sub(r"\1***@", _ANSI_RE.sub("", text or ""))


def _read_log(path: Path) -> str:
    try:
        return (path / LOG_NAME).read_text()
    except OSError:
        return ""


def _make_read_only(path: Path) -> None:
    """Everyone may read and traverse; nobody but root may write (sandbox uids are never root)."""
    for folder, dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                mode = os.stat(full).st_mode
                os.chmod(full, (mode | 0o444 | ((mode & 0o100) and 0o111)) & ~0o222)
        os.chmod(folder, 0o555)


def _remove_tree(path: Path) -> None:
    """Remove one of our own temporary build directories (read-only bits included)."""
    for folder, _dirs, _names in os.walk(path):
        try:
            os.chmod(folder, 0o755)
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)
