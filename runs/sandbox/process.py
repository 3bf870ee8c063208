"""The `process` sandbox backend: the client the worker uses to drive one runner.py process.

One sandbox = one process tree under its own uid (as root: a slot from UID_BASE up, so sandboxes
cannot read each other's files or signal each other), inside bubblewrap (view.py): its own root file
system view, PID, IPC, UTS and empty network namespaces, a private size-limited workspace (/sandbox,
/tmp, /var/tmp, /dev/shm), its own cgroup bounding memory, processes and CPU for the whole tree
(cgroups.py), lowered rlimits and an emptied environment. Each call has a wall-clock timeout; on
timeout, crash or close everything of the sandbox is SIGKILLed and reaped, its workspace unmounted.

Where the host refuses a layer (no bubblewrap, no cgroup, not root), the sandbox's facts name it
under "weak_layers", and spawn refuses to start unless the operator allows weak sandboxes
(SandboxConfig.allow_weak, settings.SANDBOX_ALLOW_WEAK).
"""

import ctypes
import ctypes.util
import dataclasses
import errno
import fcntl
import math
import os
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from environments.package import DEFAULT_OBSERVATION_MB

from . import protocol
from .cgroups import SandboxCgroup
from .errors import SandboxCrashed, SandboxError, SandboxProtocolError, SandboxTimeout, UserCodeError
from .seccomp import SeccompUnavailable, filter_fd
from .secrets import version_seed_secret
from .view import (
    BWRAP,
    RUNNER_DIR_IN_VIEW,
    WORKDIR_IN_VIEW,
    Workspace,
    bwrap_argv,
    bwrap_available,
    remove_stale_workspaces,
    view_python_path,
)

RUNNER_PATH = Path(__file__).with_name("runner.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
# Debian's interpreter: the pyenv interpreters under /root are unreadable to sandbox uids.
SANDBOX_PYTHON = "/usr/bin/python3"
SDK_PATH = REPO_ROOT / "environments" / "sdk"
SANDBOX_ROOT = Path(tempfile.gettempdir()) / "studio-sandboxes"
UID_BASE = 60000
UID_COUNT = 2000
STDERR_TAIL_BYTES = 16 * 1024
# The cgroup's memory bound sits this far above memory_mb, so one process's RLIMIT_AS fails first
# (a readable MemoryError); many processes together are stopped by the cgroup.
MEMORY_HEADROOM_MB = 64
# bwrap's own two processes (its monitor and the namespace's init) also count in the cgroup.
PIDS_HEADROOM = 4

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 16384, 1 << 18

# Without bubblewrap (a weak sandbox, allowed by the operator only): as root the sandbox still gets its
# own mount namespace with an empty read-only tmpfs over each of these (service sockets under /run,
# the databases' files, the studio's media files with every team's screenshots).
HIDDEN_PATHS = [
    "/run", "/var/run", "/var/lib/postgresql", "/etc/postgresql", "/var/lib/redis", "/etc/redis",
    "/var/lib/mysql", "/etc/mysql", "/var/lib/docker", "/home",
]


def hide_paths(*paths) -> None:
    """Also hide these from every sandbox started from now on (the Django settings add MEDIA_ROOT)."""
    for path in paths:
        if str(path) not in HIDDEN_PATHS:
            HIDDEN_PATHS.append(str(path))


def _hidden_targets() -> list[str]:
    """Existing directories to cover, resolved (so /var/run and /run count once), outermost first."""
    targets = []
    for path in HIDDEN_PATHS:
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in targets and not real.startswith(str(SANDBOX_ROOT)):
            targets.append(real)
    return sorted(targets, key=len)
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1

_libc_name = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_libc_name, use_errno=True) if _libc_name else None


# The trusted code every sandbox imports at start (the SDK and the protocol module), compiled ahead
# by the sandbox's own interpreter into the usual __pycache__ folders, which the view binds read-only
# with their sources: a sandbox then skips compiling them (~20-40 ms of its start). Sandboxed code
# cannot write there; where the host cannot either, sandboxes compile in memory as before.
_compiled_for: set[str] = set()


def compile_sandbox_bytecode(python: str) -> None:
    """Once per process and interpreter: byte-compile the SDK and protocol.py for `python`."""
    if python in _compiled_for:
        return
    _compiled_for.add(python)
    script = "import compileall, sys; compileall.compile_dir(sys.argv[1], quiet=2); compileall.compile_file(sys.argv[2], quiet=2)"
    try:
        subprocess.run([python, "-S", "-c", script, str(SDK_PATH), str(RUNNER_PATH.with_name("protocol.py"))],
                       env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        pass  # no cache: each sandbox compiles in memory


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


# -- uid slots ------------------------------------------------------------------------------------


class UidSlot:
    """A sandbox uid held through an flock, so worker processes on one host never share one."""

    def __init__(self, uid: int, lock_fd: int | None):
        self.uid = uid
        self.lock_fd = lock_fd

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


_next_slot = [os.getpid() * 17]


def acquire_uid_slot(config: SandboxConfig) -> UidSlot:
    lock_dir = config.root / "slots"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    start = _next_slot[0]
    for offset in range(config.uid_count):
        index = (start + offset) % config.uid_count
        uid = config.uid_base + index
        fd = os.open(lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        # Left-overs of a crashed worker: kill them; zombies still count against RLIMIT_NPROC, skip.
        if kill_uid_processes(uid) > 0:
            os.close(fd)
            continue
        remove_stale_workspaces(config.root, uid)
        SandboxCgroup.remove_stale(f"sb-{uid}-")
        _next_slot[0] = index + 1
        return UidSlot(uid, fd)
    raise SandboxCrashed(f"no free sandbox uid in {config.uid_base}..{config.uid_base + config.uid_count - 1}")


def sweep_stale_sandboxes(config: SandboxConfig = None) -> int:
    """Remove the workspaces and cgroups of sandboxes whose worker died (a worker calls it at start):
    those of uid slots nobody holds now. Returns how many slots were cleaned."""
    config = config or DEFAULT_CONFIG
    uids = set()
    for name in os.listdir(config.root) if config.root.is_dir() else []:
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == "sb" and parts[1].isdigit():
            uids.add(int(parts[1]))
    cleaned = 0
    for uid in sorted(uid for uid in uids if config.uid_base <= uid < config.uid_base + config.uid_count):
        try:
            slot = acquire_uid_slot(dataclasses.replace(config, uid_base=uid, uid_count=1))
        except SandboxCrashed:
            continue  # held by a live sandbox, or its zombies are not reaped yet
        slot.release()  # acquiring it removed what its last holder left
        cleaned += 1
    return cleaned


def _uid_processes(uid: int) -> tuple[list[int], int]:
    """(live pids, zombie count) of processes whose real uid is `uid`."""
    live, zombies = [], 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                text = status.read(2048)
        except OSError:
            continue
        state = uid_line = None
        for line in text.split(b"\n"):
            if line.startswith(b"State:"):
                state = line.split()[1]
            elif line.startswith(b"Uid:"):
                uid_line = line
                break
        if uid_line is None or int(uid_line.split()[1]) != uid:
            continue
        if state in (b"Z", b"X"):
            zombies += 1
        else:
            live.append(int(entry.name))
    return live, zombies


def kill_uid_processes(uid: int, rounds: int = 50) -> int:
    """SIGKILL every process of `uid` (escapees of the process group included); returns zombies left."""
    zombies = 0
    for _ in range(rounds):
        live, zombies = _uid_processes(uid)
        if not live:
            break
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
    # Zombies of escaped grandchildren belong to init, which reaps them (here within ~2 s); the slot
    # allocator skips a uid until they are gone, since they still count against RLIMIT_NPROC.
    return len(live) + zombies


# -- the sandbox ----------------------------------------------------------------------------------


def _loopback_up() -> None:
    """Set IFF_UP on `lo` of this process's network namespace (needs CAP_NET_ADMIN in it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def _mount_call(source: bytes, target: bytes, fstype: bytes | None, flags: int, data: bytes | None) -> None:
    if _LIBC.mount(source, target, fstype, flags, data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target.decode()}: {os.strerror(errno)}")


def _hide_filesystem(targets: list[str]) -> None:
    """A private mount namespace in which each target is an empty read-only tmpfs. Fails closed."""
    if _LIBC.unshare(CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWNS): {os.strerror(errno)}")
    _mount_call(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    for target in targets:
        _mount_call(b"tmpfs", target.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=0555")


def _child_setup(*, uid, gid, rlimits, isolate_network, loopback=False, hidden=(), cgroup_fds=()):
    """Runs in the child between fork and exec: cgroup, namespaces, rlimits, then drop to the sandbox uid."""

    def setup():
        SandboxCgroup.join(cgroup_fds)
        if hidden and _LIBC is not None:
            _hide_filesystem(hidden)
        if isolate_network and _LIBC is not None:
            # Failure is fine: the runner reports its namespace and the client records the outcome.
            _LIBC.unshare(CLONE_NEWNET if uid is not None else CLONE_NEWUSER | CLONE_NEWNET)
            if loopback:
                try:
                    _loopback_up()
                except OSError:
                    pass  # the site server then fails to bind and says so in the load error
        for resource_id, value in rlimits:
            resource.setrlimit(resource_id, (value, value))
        if uid is not None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        if _LIBC is not None:
            # Set after setuid, which clears it: the sandbox dies with the worker.
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return setup


def _first_child(pid: int | None, wait_s: float = 0.0) -> int | None:
    """The oldest child of a single-threaded process (None when it has none within `wait_s`)."""
    deadline = time.monotonic() + wait_s
    while pid is not None:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                children = handle.read().split()
        except OSError:
            return None
        if children:
            return min(int(child) for child in children)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.001)
    return None


F_SETPIPE_SZ = 1031
PROTOCOL_PIPE_BYTES = 1 << 20


def widen_pipe(fd: int) -> None:
    """Give a protocol pipe room for a whole image frame (the default 64 KB makes a 100 KB frame
    cost several wake-ups of both processes); where the kernel refuses, the default stays."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, PROTOCOL_PIPE_BYTES)
    except OSError:
        pass


def _validated_relative(name: str) -> Path:
    path = Path(name)
    if not name or path.is_absolute() or any(part in ("", ".", "..") for part in path.parts):
        raise ValueError(f"bad file name in package: {name!r}")
    return path


def _entry_label(mode: str, entrypoint: str) -> str:
    if entrypoint.startswith("gymnasium:"):
        return entrypoint
    module = entrypoint.partition(":")[0] or ("agent" if mode == "agent" else "env")
    return module if module.endswith(".py") else f"{module}.py"


class ProcessSandbox:
    """One sandboxed runner: `start` (or `spawn` + `load`), then reset/step/verify or reset/act, close.

    with ProcessSandbox() as env:
        env.start(files, mode="env", entrypoint="env:Maze", limits=SandboxLimits(step_timeout_s=2))
        observation = env.reset({"id": "t1"}, seed=0)
        observation, reward, terminated, truncated, info = env.step(action)
    """

    backend = "process"

    def __init__(self, config: SandboxConfig = DEFAULT_CONFIG):
        self.config = config
        self.limits = SandboxLimits()
        self.mode: str | None = None
        self.entrypoint = ""
        self.label = "sandbox"
        self.facts: dict = {}
        self.network_isolated = False
        self.uid: int | None = None
        self.uid_switched = False
        self.workdir: Path | None = None
        self.workspace: Workspace | None = None
        self.cgroup: SandboxCgroup | None = None
        self.pooled = False
        self._runner_pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._slot: UidSlot | None = None
        self._buffer = bytearray()
        self._stderr_tail = bytearray()
        self._stderr_open = False
        self._killed_by_us = False
        self._closed = False
        self._episode_deadline: float | None = None
        self._dead = False
        self.tools: list | None = None
        self.action_space: dict | None = None
        self.observation_space: dict | None = None
        # A side result of the latest reset/step, kept out of the observation: a browser env's
        # screenshot {"type": "image/jpeg", "base64": ...}; the worker stores it as the step's file.
        self.last_artifact: dict | None = None
        self.reset_info: dict = {}
        self.action_schema: dict | None = None  # the environment's `action_schema` (reported at reset)
        self.env_state: dict | None = None  # the environment's `state()` after its last reset or step
        self.observation_error: str | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def spawn(self) -> "ProcessSandbox":
        """Start the runner process (interpreter up, waiting for `load`), in a fresh empty workspace."""
        if self._proc is not None:
            raise SandboxError("sandbox already started")
        config = self.config
        compile_sandbox_bytecode(config.python)
        root = config.root
        root.mkdir(mode=0o711, exist_ok=True)
        self._check_root(root)
        is_root = os.geteuid() == 0
        notes, weak = [], []
        cgroup_fds: list[int] = []
        seccomp_fd: int | None = None
        try:
            if is_root:
                self._slot = acquire_uid_slot(config)
                self.uid, gid = self._slot.uid, self._slot.uid
                self.uid_switched = True
            else:
                self.uid, gid = os.getuid(), None
                weak.append("uid_switch")
                notes.append("host is not root: sandbox runs as the worker's own uid (no uid switch)")
            self.workspace = Workspace.create(root, uid=self.uid if is_root else None, quota_mb=config.disk_mb)
            self.workdir = self.workspace.work
            if self.workspace.quota_mb is None:
                weak.append("disk_quota")
                notes.append("no size-limited workspace: what the sandbox writes is not bounded")
            self.cgroup, why = SandboxCgroup.create(f"sb-{self.uid}-" if is_root else "sb-")
            if self.cgroup is not None:
                self.cgroup.limit(memory_mb=(config.max_memory_mb or 4096) + MEMORY_HEADROOM_MB,
                                  pids=config.nproc + PIDS_HEADROOM, cpus=config.cpus)
                cgroup_fds = self.cgroup.join_fds()
            else:
                weak.append("cgroup")
                notes.append(f"{why}: memory, processes and CPU are bound per process only")
            use_view = config.view and bwrap_available(config.bwrap)
            if not use_view:
                weak += ["filesystem_view", "pid_namespace", "seccomp"]
                notes.append("no bubblewrap view: the sandbox sees the host's world-readable files and processes")
            else:
                try:
                    seccomp_fd = filter_fd()
                except SeccompUnavailable as exc:
                    weak.append("seccomp")
                    notes.append(f"no system-call filter ({exc})")
            self._refuse_if_weak(weak)

            python_path = list(config.python_path) if config.python_path is not None else default_python_path()
            workdir = WORKDIR_IN_VIEW if use_view else str(self.workdir)
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "HOME": workdir,
                "TMPDIR": "/tmp" if use_view else workdir,
                "PYTHONPATH": os.pathsep.join(view_python_path(python_path) if use_view else python_path),
                "PYTHONHASHSEED": "0",
                "PYTHONDONTWRITEBYTECODE": "1",
                # One BLAS thread: predictable CPU use, and a far smaller address space under RLIMIT_AS.
                "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
            }
            runner = f"{RUNNER_DIR_IN_VIEW}/{RUNNER_PATH.name}" if use_view else str(RUNNER_PATH)
            argv = [config.python, "-S", "-B", runner]  # -S: skip site (.pth start-up hooks, ~40 ms)
            if config.preload:
                argv.append("--preload=" + ",".join(config.preload))
            hidden = []
            if use_view:
                argv = bwrap_argv(
                    python=config.python, python_path=python_path, runner_dir=str(RUNNER_PATH.parent),
                    workspace=self.workspace, isolate_network=config.isolate_network,
                    browser=config.max_memory_mb == 0 or config.loopback, bwrap=config.bwrap, seccomp_fd=seccomp_fd,
                ) + argv
            elif is_root:
                needed = [os.path.realpath(p) for p in [*python_path, str(self.workdir), config.python, str(RUNNER_PATH.parent)]]
                hidden = [t for t in _hidden_targets() if not any(n == t or n.startswith(t + os.sep) for n in needed)]
            mb = 1024 * 1024
            rlimits = [
                (resource.RLIMIT_CPU, config.max_cpu_s),
                (resource.RLIMIT_NPROC, config.nproc),
                (resource.RLIMIT_FSIZE, config.fsize_mb * mb),
                (resource.RLIMIT_NOFILE, config.nofile),
                (resource.RLIMIT_CORE, 0),
            ]
            if config.max_memory_mb:
                rlimits.insert(0, (resource.RLIMIT_AS, config.max_memory_mb * mb))
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=env,
                close_fds=True,
                pass_fds=() if seccomp_fd is None else (seccomp_fd,),
                start_new_session=True,
                preexec_fn=_child_setup(
                    uid=self.uid if is_root else None,
                    gid=gid,
                    rlimits=rlimits,
                    isolate_network=config.isolate_network and not use_view,
                    loopback=config.loopback,
                    hidden=hidden,
                    cgroup_fds=cgroup_fds,
                ),
            )
        except BaseException:
            self._release()
            raise
        finally:
            for fd in (*cgroup_fds, *(() if seccomp_fd is None else (seccomp_fd,))):
                os.close(fd)
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            os.set_blocking(stream.fileno(), False)
        for stream in (self._proc.stdin, self._proc.stdout):
            widen_pipe(stream.fileno())
        self._stderr_open = True
        self.facts = {
            "backend": self.backend, "uid": self.uid, "uid_switched": self.uid_switched, "notes": notes,
            "isolation": {
                "filesystem_view": use_view,
                "pid_namespace": use_view,
                "seccomp": seccomp_fd is not None,  # the system-call filter (runs/sandbox/seccomp.py)
                "cgroup": f"v{self.cgroup.version}" if self.cgroup is not None else None,
                "disk_quota_mb": self.workspace.quota_mb,
                "weak_layers": weak,
            },
        }
        if hidden:
            self.facts["filesystem_hidden"] = hidden
        return self

    def _refuse_if_weak(self, weak: list[str]) -> None:
        if not weak:
            return
        allowed = self.config.allow_weak
        if allowed is None:
            allowed = allow_weak_setting()
        if not allowed:
            raise SandboxError(
                "refusing to run untrusted code in a weak sandbox: this host does not provide "
                + ", ".join(layer.replace("_", " ") for layer in weak)
                + " (an operator may allow it with SANDBOX_ALLOW_WEAK=true)"
            )

    def start(
        self,
        files: dict[str, str | bytes],
        mode: str = "env",
        entrypoint: str = "env:Environment",
        limits: SandboxLimits | dict | None = None,
    ) -> dict:
        """Spawn (unless pre-warmed) and load; returns the reproducibility facts."""
        if self._proc is None:
            self.spawn()
        return self.load(files, mode=mode, entrypoint=entrypoint, limits=limits)

    def load(self, files, *, mode: str, entrypoint: str, limits=None) -> dict:
        if mode not in protocol.MODES:
            raise ValueError(f"mode must be one of {protocol.MODES}, got {mode!r}")
        if not isinstance(limits, SandboxLimits):
            limits = SandboxLimits.from_dict(limits)
        self.limits, self.mode, self.entrypoint = limits, mode, entrypoint
        self.label = _entry_label(mode, entrypoint)
        try:
            if self.cgroup is not None:
                # The whole tree's bound: memory_mb (plus headroom), nproc processes, over all of them.
                self.cgroup.limit(memory_mb=limits.memory_mb + MEMORY_HEADROOM_MB, pids=limits.nproc + PIDS_HEADROOM)
            self._write_files(files)
        except BaseException:
            self.close()
            raise
        try:
            extra = {}
            if mode == "env":
                # Only an environment's own sandbox learns its version's seed secret (secrets.py).
                secret = version_seed_secret(files)
                if secret:
                    extra["seed_secret"] = secret
            result = self._call("load", limits.load_timeout_s, mode=mode, entrypoint=entrypoint, limits=limits.for_runner(), **extra)
        except UserCodeError:
            self.close()  # a sandbox whose code did not load is of no further use
            raise
        host_netns = os.readlink("/proc/self/ns/net")
        self.network_isolated = bool(result.get("netns")) and result["netns"] != host_netns
        self.facts.update(
            {
                "python": result.get("python"),
                "numpy": result.get("numpy"),
                "gymnasium": result.get("gymnasium"),
                "uid": result.get("uid"),
                "pid": result.get("pid"),
                "network_isolated": self.network_isolated,
                "limits": dataclasses.asdict(limits) | {"applied": result.get("limits")},
                "pooled": self.pooled,
                "mode": mode,
                "entrypoint": entrypoint,
            }
        )
        if not self.network_isolated:
            self.facts["notes"].append("network namespace could not be created: network is NOT cut off")
        self.tools = result.get("tools")
        return self.facts

    def close(self) -> None:
        """Ask the runner to close the environment, then kill whatever is left and remove the workdir."""
        if self._closed:
            return
        if self._proc is not None and not self._dead and self._proc.poll() is None and self.mode is not None:
            try:
                self._call("close", 1.0)
            except SandboxError:
                pass
        self._kill()
        self._release()
        self._closed = True

    def __enter__(self) -> "ProcessSandbox":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        # Last resort only; callers close explicitly or use `with`.
        if not getattr(self, "_closed", True) and getattr(self, "_proc", None) is not None:
            try:
                self._kill()
                self._release()
            except Exception:
                pass

    def interrupt(self) -> None:
        """Kill the sandbox's processes from any thread (a cancel): the thread waiting in a call sees
        the pipe close and raises SandboxCrashed, then tears the sandbox down as usual. Only signals
        are sent here; pipes, workdir and uid slot stay for the waiting thread to release."""
        proc = self._proc
        if proc is None or self._closed or proc.returncode is not None:
            return  # never signal a reaped pid: it may belong to someone else by now
        self._signal_kill(proc)
        if self.uid_switched and self.uid is not None:
            kill_uid_processes(self.uid)

    def _signal_kill(self, proc) -> None:
        """SIGKILL the process group and the cgroup (the whole tree, wherever it forked to)."""
        self._killed_by_us = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup is not None:
            self.cgroup.kill()

    @property
    def alive(self) -> bool:
        return self._proc is not None and not self._closed and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The runner's host pid (inside bubblewrap: bwrap -> the namespace's init -> the runner)."""
        if self._proc is None:
            return None
        if self._runner_pid is None:
            if not self.facts.get("isolation", {}).get("filesystem_view"):
                self._runner_pid = self._proc.pid
            else:
                self._runner_pid = _first_child(_first_child(self._proc.pid, wait_s=2.0), wait_s=2.0)
        return self._runner_pid or self._proc.pid

    def stderr_tail(self) -> str:
        """The last few KB the sandbox wrote to stderr (user prints included), for logs."""
        return self._stderr_tail.decode("utf-8", "replace")

    # -- protocol calls -----------------------------------------------------------------------

    def reset(self, task: dict, seed: int | None) -> Any:
        """Start an episode; env mode returns the first observation (agent mode returns None)."""
        self._episode_deadline = time.monotonic() + self.limits.episode_timeout_s
        result = self._call("reset", self.limits.step_timeout_s, task=task, seed=seed)
        if self.mode == "env":
            self.action_space, self.observation_space = result.get("action_space"), result.get("observation_space")
            self.last_artifact = result.get("artifact")
            self.reset_info = result.get("info") or {}
            self.action_schema, self.env_state = result.get("action_schema"), result.get("state")
            return result["observation"]
        return None

    def step(self, action: Any) -> StepResult:
        self._require("env", "step")
        self.last_artifact = None
        result = self._call("step", self.limits.step_timeout_s, action=action)
        self.last_artifact = result.get("artifact")
        # An observation over the version's limit: the step is real, its observation is not sent.
        self.observation_error = result.get("observation_error")
        self.env_state = result.get("state")
        return StepResult(result["observation"], result["reward"], result["terminated"], result["truncated"], result["info"])

    def verify(self, timeout: float | None = None) -> tuple[float | None, str]:
        """Judge the final state. A given `timeout` is the verifier's own budget: the episode clock,
        which may have run out while the agent acted, does not cut it short."""
        self._require("env", "verify")
        if timeout is not None:
            self._episode_deadline = None
        result = self._call("verify", timeout if timeout is not None else self.limits.step_timeout_s)
        return result["reward"], result["reason"]

    def act(self, observation: Any, info: dict | None = None, *, space: dict | None = None) -> Any:
        """The agent's action; `space` ({"action_space", "tools"}) goes to an agent with observe_space()."""
        self._require("agent", "act")
        extra = {"space": space} if space is not None else {}
        return self._call("act", self.limits.step_timeout_s, observation=observation, info=info or {}, **extra)

    def _require(self, mode: str, op: str) -> None:
        if self.mode != mode:
            raise SandboxError(f"{op}() is only for {mode} sandboxes (this one is {self.mode})")

    def call(self, op: str, timeout: float, **fields) -> Any:
        """One protocol request answered within `timeout` seconds, whatever this sandbox's episode clock
        says: for a host that keeps its own clocks per episode (shared.py). Same errors as every call."""
        return self._exchange(op, fields, time.monotonic() + timeout, f"{self.label} {op}() did not answer within {timeout:.1f} s")

    def _call(self, op: str, timeout: float, **fields) -> Any:
        timeout_reason = f"{self.label} {op}() did not answer within {timeout:.1f} s"
        deadline = time.monotonic() + timeout
        if self._episode_deadline is not None and op not in ("load", "close") and self._episode_deadline < deadline:
            deadline = self._episode_deadline
            timeout_reason = (
                f"{self.label} episode did not finish within episode_timeout_s={self.limits.episode_timeout_s:g} s"
                f" (during {op}())"
            )
        return self._exchange(op, fields, deadline, timeout_reason)

    def _exchange(self, op: str, fields: dict, deadline: float, timeout_reason: str) -> Any:
        if self._closed or self._proc is None or self._dead:
            raise SandboxCrashed(f"{self.label} {op}(): the sandbox is no longer running")
        try:
            line = protocol.encode(protocol.request(op, **fields))
        except (TypeError, ValueError) as exc:
            raise SandboxError(f"{op}() arguments are not JSON: {exc}") from None
        self._send(line, deadline, op, timeout_reason)
        response = self._receive(deadline, op, timeout_reason)
        if response.get("ok") is True:
            return response.get("result")
        kind = response.get("kind", protocol.KIND_EXCEPTION)
        message = response.get("error") or "unknown error"
        if kind == protocol.KIND_PROTOCOL:
            self._kill()
            raise SandboxProtocolError(f"{self.label} {op}(): the runner refused the request: {message}")
        raise UserCodeError(message, kind=kind, op=op)

    def _send(self, line: bytes, deadline: float, op: str, timeout_reason: str) -> None:
        fd = self._proc.stdin.fileno()
        view = memoryview(line)
        while view:
            try:
                written = os.write(fd, view)
                view = view[written:]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                self._crashed(op)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._timed_out(timeout_reason)
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            poller.poll(remaining * 1000)

    def _receive(self, deadline: float, op: str, timeout_reason: str) -> dict:
        out_fd = self._proc.stdout.fileno()
        err_fd = self._proc.stderr.fileno()
        while True:
            try:
                # Arrays come as binary frames after the line; `{"__float__": ...}` stays as it is
                # (that is how it is stored and served).
                message = protocol.take_message(self._buffer)
            except protocol.ProtocolError as exc:
                self._kill()
                raise SandboxProtocolError(f"{self.label} {op}(): sandbox broke the protocol: {exc}") from None
            if message is not None:
                # Anything printed before the answer is already in the pipe: keep stderr_tail in order.
                self._drain_stderr(0)
                return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._timed_out(timeout_reason)
            poller = select.poll()
            poller.register(out_fd, select.POLLIN)
            if self._stderr_open:
                poller.register(err_fd, select.POLLIN)
            for fd, _event in poller.poll(remaining * 1000):
                data = self._read(fd)
                if fd == out_fd:
                    if not data:
                        self._crashed(op)
                    self._buffer += data
                elif data:
                    self._stderr_tail += data
                    del self._stderr_tail[:-STDERR_TAIL_BYTES]
                else:
                    self._stderr_open = False

    def _drain_stderr(self, wait_s: float = 0.05) -> None:
        """What the sandbox has written to stderr so far (a dead one's last words explain the crash)."""
        fd = self._proc.stderr.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        for _ in range(64):
            if not self._stderr_open or not poller.poll(wait_s * 1000):
                return
            data = self._read(fd)
            if not data:
                self._stderr_open = data is None
                return
            self._stderr_tail += data
            del self._stderr_tail[:-STDERR_TAIL_BYTES]

    @staticmethod
    def _read(fd: int) -> bytes | None:
        try:
            return os.read(fd, PROTOCOL_PIPE_BYTES)
        except BlockingIOError:
            return None  # spurious wake-up; poll again
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise

    def _timed_out(self, reason: str):
        self._kill()
        raise SandboxTimeout(reason)

    def _crashed(self, op: str):
        """The protocol pipe closed: wait briefly for the exit status, then explain it."""
        try:
            self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        killed_by_us = self._killed_by_us
        self._drain_stderr()
        self._kill()
        raise SandboxCrashed(f"{self.label} {op}(): {self._describe_exit(self._proc.returncode, killed_by_us)}")

    def _describe_exit(self, returncode: int | None, killed_by_us: bool) -> str:
        limits = self.limits
        if returncode is not None and 128 < returncode < 128 + 65 and self.facts.get("isolation", {}).get("filesystem_view"):
            returncode = -(returncode - 128)  # bwrap reports a signal death of its child as 128 + signal
        if returncode is None:
            reason = "sandbox closed its protocol pipe"
        elif returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            if name == "SIGKILL" and not killed_by_us:
                reason = f"sandbox process was killed (SIGKILL), most likely out of memory (memory_mb={limits.memory_mb})"
                if self.cgroup is not None and self.cgroup.oom_kills():
                    reason = (f"sandbox was killed: its processes together went over memory_mb={limits.memory_mb}"
                              " (the kernel's out-of-memory killer)")
            elif name == "SIGXCPU":
                reason = f"sandbox used up its CPU time (cpu_s={limits.effective_cpu_s}) and was killed (SIGXCPU)"
            elif name == "SIGXFSZ":
                reason = f"sandbox wrote a file over the size limit (fsize_mb={limits.fsize_mb}) and was killed (SIGXFSZ)"
            else:
                reason = f"sandbox exited with signal {name}"
        else:
            reason = f"sandbox exited with status {returncode}"
        last = [line for line in self.stderr_tail().splitlines() if line.strip()]
        if last:
            reason += f"; last stderr line: {last[-1][-300:]}"
        return reason

    # -- files and teardown -------------------------------------------------------------------

    def _write_files(self, files: dict) -> None:
        uid = self.uid if self.uid_switched else None
        for name, content in files.items():
            relative = _validated_relative(name)
            target = self.workdir / relative
            for parent in reversed(relative.parents[:-1]):
                directory = self.workdir / parent
                if not directory.exists():
                    directory.mkdir(mode=0o700)
                    if uid is not None:
                        os.chown(directory, uid, uid)
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            if uid is not None:
                os.chown(target, uid, uid)

    def _kill(self) -> None:
        """SIGKILL the process group, then anything else of the sandbox uid (setsid escapees); reap."""
        proc = self._proc
        if proc is None:
            return
        self._dead = True
        self._signal_kill(proc)
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
        if self.uid_switched and self.uid is not None:
            kill_uid_processes(self.uid)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        self._stderr_open = False

    def _release(self) -> None:
        if self.workspace is not None:
            self.workspace.remove()
            self.workspace = None
        elif self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self._slot is not None:
            self._slot.release()
            self._slot = None

    @staticmethod
    def _check_root(root: Path) -> None:
        info = root.lstat()
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise SandboxError(f"{root} must be owned by uid {os.geteuid()} and writable by nobody else")
