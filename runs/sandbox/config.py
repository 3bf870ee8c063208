"""What every sandbox backend is configured with: the host-side SandboxConfig, the per-rollout
SandboxLimits (the [limits] table of environment.toml), the browser presets and the paths of the
trusted code a sandbox imports (the runner, the SDK)."""

import dataclasses
import math
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from environments.package import DEFAULT_OBSERVATION_MB

from .view import BWRAP

RUNNER_PATH = Path(__file__).with_name("runner.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
# Debian's interpreter: the pyenv interpreters under /root are unreadable to sandbox uids.
SANDBOX_PYTHON = "/usr/bin/python3"
SDK_PATH = REPO_ROOT / "environments" / "sdk"
SANDBOX_ROOT = Path(tempfile.gettempdir()) / "studio-sandboxes"
UID_BASE = 60000
UID_COUNT = 2000
# The cgroup's memory bound sits this far above memory_mb, so one process's RLIMIT_AS fails first
# (a readable MemoryError); many processes together are stopped by the cgroup.
MEMORY_HEADROOM_MB = 64
# bwrap's own two processes (its monitor and the namespace's init) also count in the cgroup.
PIDS_HEADROOM = 4


def allow_weak_setting() -> bool:
    """settings.SANDBOX_ALLOW_WEAK where Django is configured; False otherwise."""
    try:
        from django.conf import settings  # noqa: PLC0415 - the sandbox package works without Django

        return bool(getattr(settings, "SANDBOX_ALLOW_WEAK", False)) if settings.configured else False
    except ImportError:
        return False


def default_python_path():
    """What sandboxed code imports from: the SDK, then this interpreter's site-packages (numpy, gymnasium)."""
    paths = [str(SDK_PATH)]
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if path not in paths:
            paths.append(path)
    return paths


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Per-sandbox limits; the [limits] table of environment.toml fills the first three."""

    step_timeout_s: float = 5.0
    episode_timeout_s: float = 300.0
    memory_mb: int = 512
    load_timeout_s: float = 30.0
    cpu_s: int | None = None  # CPU seconds for the process; defaults to episode_timeout_s
    nproc: int = 32
    fsize_mb: int = 16
    nofile: int = 256
    observation_mb: float = DEFAULT_OBSERVATION_MB  # the runner refuses larger observations
    # Browser kind: Chromium reserves tens of GB of address space, so memory_mb caps each process's
    # data segment (RLIMIT_DATA) instead of RLIMIT_AS, and its threads need far more than 32 tasks.
    browser: bool = False

    @classmethod
    def from_dict(cls, values: dict | None) -> "SandboxLimits":
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in (values or {}).items() if key in names and value is not None})

    @property
    def effective_cpu_s(self) -> int:
        return int(self.cpu_s or math.ceil(self.episode_timeout_s))

    def for_runner(self) -> dict:
        limits = {
            "memory_mb": self.memory_mb,
            "cpu_s": self.effective_cpu_s,
            "nproc": self.nproc,
            "fsize_mb": self.fsize_mb,
            "nofile": self.nofile,
            "observation_mb": self.observation_mb,
        }
        if self.browser:
            limits["browser"] = True
        return limits

    def for_browser(self) -> "SandboxLimits":
        """These limits as a browser sandbox needs them: room for Chromium's processes and threads."""
        return dataclasses.replace(
            self,
            browser=True,
            nproc=max(self.nproc, BROWSER_NPROC),
            nofile=max(self.nofile, BROWSER_NOFILE),
            fsize_mb=max(self.fsize_mb, 64),
            memory_mb=max(self.memory_mb, BROWSER_MIN_MEMORY_MB),
        )


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Host-side settings (the Django settings build one); the defaults suit this machine."""

    python: str = SANDBOX_PYTHON
    python_path: tuple[str, ...] | None = None  # None: default_python_path()
    root: Path = SANDBOX_ROOT
    uid_base: int = UID_BASE
    uid_count: int = UID_COUNT
    isolate_network: bool = True
    # Ceilings set at spawn; load lowers them to the rollout's SandboxLimits. 0: no RLIMIT_AS (browser).
    max_memory_mb: int = 4096
    max_cpu_s: int = 3600
    nproc: int = 32
    fsize_mb: int = 16
    nofile: int = 256
    # Modules a pre-warmed runner imports while waiting: the SDK (~10 ms) by default; add
    # ("numpy", "gymnasium") for Gymnasium environments (~250 ms of imports moved off the rollout).
    preload: tuple[str, ...] = ("studio_sdk",)
    # Bring the loopback interface of the sandbox's network namespace up (a fresh one has it down):
    # a browser sandbox serves its site on 127.0.0.1 inside the namespace. (bwrap always does.)
    loopback: bool = False
    # The file system view and namespaces of view.py (bubblewrap); False: the older, weaker set-up.
    view: bool = True
    bwrap: str = BWRAP
    # The workspace's size: package files, /tmp, /var/tmp and /dev/shm together.
    disk_mb: int = 64
    cpus: float = 1.0  # CPU share of the sandbox's cgroup (1.0 = one core)
    # Start a sandbox that lacks an isolation layer (view, PID namespace, cgroup, disk quota, uid
    # switch)? None: settings.SANDBOX_ALLOW_WEAK (False when unset).
    allow_weak: bool | None = None
    # The host conventions sandboxed code can depend on without asking: the hash seed of str and bytes
    # (PYTHONHASHSEED, hence a set's iteration order) and the local time zone (TZ). The studio fixes
    # both, so an episode repeats on any host; the quality lab's portability check varies them.
    hash_seed: int = 0
    timezone: str = "UTC"

    def conventions(self) -> dict[str, str]:
        """The runner's environment variables for the host conventions (both backends set them)."""
        return {"PYTHONHASHSEED": str(self.hash_seed), "TZ": self.timezone}


DEFAULT_CONFIG = SandboxConfig()
# Chromium (browser, renderer, GPU/utility processes, ~20 threads each) plus Playwright's node driver.
BROWSER_NPROC = 768
BROWSER_NOFILE = 4096
BROWSER_MIN_MEMORY_MB = 1024
BROWSER_CONFIG = SandboxConfig(
    max_memory_mb=0,
    nproc=BROWSER_NPROC,
    nofile=BROWSER_NOFILE,
    fsize_mb=64,
    disk_mb=512,  # Chromium's profile and /dev/shm
    cpus=2.0,
    loopback=True,
    preload=("studio_sdk", "studio_sdk.browser"),
)
# For a pool: the waiting runner also launches Chromium, so a rollout starts with a warm browser.
BROWSER_WARM_CONFIG = dataclasses.replace(BROWSER_CONFIG, preload=("studio_sdk", "studio_sdk.browser:warm"))


class StepResult(NamedTuple):
    observation: Any
    reward: float | None
    terminated: bool
    truncated: bool
    info: dict

