"""The `process` sandbox backend: the runner as a local process tree, isolated by the host's kernel.

One sandbox = one process tree under its own uid (as root: a slot from UID_BASE up, uids.py, so
sandboxes cannot read each other's files or signal each other), inside bubblewrap (view.py): its own
root file system view, PID, IPC, UTS and empty network namespaces, a private size-limited workspace
(/sandbox, /tmp, /var/tmp, /dev/shm), its own cgroup bounding memory, processes and CPU for the whole
tree (cgroups.py), a system-call filter (seccomp.py), lowered rlimits and an emptied environment.
The conversation with the runner, timeouts and teardown are the Sandbox base's (base.py); this
module only launches and kills. On timeout, crash or close everything of the sandbox is SIGKILLed
and reaped, its workspace unmounted.

Where the host refuses a layer (no bubblewrap, no cgroup, not root), the sandbox's facts name it
under "weak_layers", and spawn refuses to start unless the operator allows weak sandboxes
(SandboxConfig.allow_weak, settings.SANDBOX_ALLOW_WEAK).
"""

import ctypes
import fcntl
import os
import resource
import signal
import socket
import struct
import subprocess
import time

from .base import LIBC, PROTOCOL_PIPE_BYTES, IsolationLayers, Sandbox, die_with_parent
from .cgroups import SandboxCgroup
# The configuration and the uid slots lived here first: their names stay importable from here.
from .config import (  # noqa: F401 - re-exported
    BROWSER_CONFIG,
    BROWSER_MIN_MEMORY_MB,
    BROWSER_NOFILE,
    BROWSER_NPROC,
    BROWSER_WARM_CONFIG,
    DEFAULT_CONFIG,
    MEMORY_HEADROOM_MB,
    PIDS_HEADROOM,
    REPO_ROOT,
    RUNNER_PATH,
    SANDBOX_PYTHON,
    SANDBOX_ROOT,
    SDK_PATH,
    UID_BASE,
    UID_COUNT,
    SandboxConfig,
    SandboxLimits,
    StepResult,
    allow_weak_setting,
    default_python_path,
)
from .seccomp import SeccompUnavailable, filter_fd
from .uids import UidSlot, acquire_uid_slot, kill_uid_processes, sweep_stale_sandboxes, uid_processes  # noqa: F401
from .view import RUNNER_DIR_IN_VIEW, WORKDIR_IN_VIEW, bwrap_argv, bwrap_available, view_python_path

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


SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1

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


# -- in the child, between fork and exec -----------------------------------------------------------


def _loopback_up() -> None:
    """Set IFF_UP on `lo` of this process's network namespace (needs CAP_NET_ADMIN in it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def _mount_call(source: bytes, target: bytes, fstype: bytes | None, flags: int, data: bytes | None) -> None:
    if LIBC.mount(source, target, fstype, flags, data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target.decode()}: {os.strerror(errno)}")


def _hide_filesystem(targets: list[str]) -> None:
    """A private mount namespace in which each target is an empty read-only tmpfs. Fails closed."""
    if LIBC.unshare(CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWNS): {os.strerror(errno)}")
    _mount_call(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    for target in targets:
        _mount_call(b"tmpfs", target.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=0555")


def _child_setup(*, uid, gid, rlimits, isolate_network, loopback=False, hidden=(), cgroup_fds=()):
    """Runs in the child between fork and exec: cgroup, namespaces, rlimits, then drop to the sandbox uid."""

    def setup():
        SandboxCgroup.join(cgroup_fds)
        if hidden and LIBC is not None:
            _hide_filesystem(hidden)
        if isolate_network and LIBC is not None:
            # Failure is fine: the runner reports its namespace and the client records the outcome.
            LIBC.unshare(CLONE_NEWNET if uid is not None else CLONE_NEWUSER | CLONE_NEWNET)
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
        # Set after setuid, which clears it: the sandbox dies with the worker.
        die_with_parent()

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


def widen_pipe(fd: int) -> None:
    """Give a protocol pipe room for a whole image frame (the default 64 KB makes a 100 KB frame
    cost several wake-ups of both processes); where the kernel refuses, the default stays."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, PROTOCOL_PIPE_BYTES)
    except OSError:
        pass



# -- the sandbox ----------------------------------------------------------------------------------


class ProcessSandbox(Sandbox):
    """A Sandbox whose runner is a local process tree: bubblewrap's view, a cgroup, rlimits, a uid.

    with ProcessSandbox() as env:
        env.start(files, mode="env", entrypoint="env:Maze", limits=SandboxLimits(step_timeout_s=2))
        observation = env.reset({"id": "t1"}, seed=0)
    """

    backend = "process"

    def __init__(self, config: SandboxConfig = DEFAULT_CONFIG):
        super().__init__(config)
        self.cgroup: SandboxCgroup | None = None
        self.hidden: list[str] = []  # without bubblewrap, as root: host paths covered by an empty tmpfs
        self._bwrap = False  # inside bubblewrap's view (and its PID namespace)
        self._seccomp = False  # under the system-call filter
        self._runner_pid: int | None = None

    # -- spawn, step by step (the uid slot and the workspace are the base's) -------------------

    def _prepare(self) -> None:
        compile_sandbox_bytecode(self.config.python)

    def _launch(self, layers: IsolationLayers) -> subprocess.Popen:
        config = self.config
        fds: list[int] = []  # the cgroup's and the filter's: the child inherits them, we close ours
        try:
            cgroup_fds = self._make_cgroup(layers)
            fds += cgroup_fds
            seccomp_fd = self._choose_view(layers)
            if seccomp_fd is not None:
                fds.append(seccomp_fd)
            self._refuse_if_weak(layers)
            python_path = list(config.python_path) if config.python_path is not None else default_python_path()
            if not self._bwrap and self.uid_switched:
                self.hidden = self._paths_to_hide(python_path)
            proc = subprocess.Popen(
                self._argv(python_path, seccomp_fd),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=self._environment(python_path),
                close_fds=True,
                pass_fds=() if seccomp_fd is None else (seccomp_fd,),
                start_new_session=True,
                preexec_fn=_child_setup(
                    uid=self.uid if self.uid_switched else None,
                    gid=self.uid,
                    rlimits=self._rlimits(),
                    isolate_network=config.isolate_network and not self._bwrap,
                    loopback=config.loopback,
                    hidden=self.hidden,
                    cgroup_fds=cgroup_fds,
                ),
            )
        finally:
            for fd in fds:
                os.close(fd)
        for stream in (proc.stdin, proc.stdout):
            widen_pipe(stream.fileno())
        return proc

    def _make_cgroup(self, layers: IsolationLayers) -> list[int]:
        """The sandbox's cgroup at the spawn ceilings (load lowers them); the fds its child joins by."""
        config = self.config
        self.cgroup, why = SandboxCgroup.create(f"sb-{self.uid}-" if self.uid_switched else "sb-")
        if self.cgroup is None:
            layers.lack("cgroup", note=f"{why}: memory, processes and CPU are bound per process only")
            return []
        self.cgroup.limit(memory_mb=(config.max_memory_mb or 4096) + MEMORY_HEADROOM_MB,
                          pids=config.nproc + PIDS_HEADROOM, cpus=config.cpus)
        return self.cgroup.join_fds()

    def _choose_view(self, layers: IsolationLayers) -> int | None:
        """Bubblewrap's view where the host has it, with the system-call filter; returns the filter's fd."""
        self._bwrap = self.config.view and bwrap_available(self.config.bwrap)
        if not self._bwrap:
            layers.lack("filesystem_view", "pid_namespace", "seccomp",
                        note="no bubblewrap view: the sandbox sees the host's world-readable files and processes")
            return None
        try:
            seccomp_fd = filter_fd()
        except SeccompUnavailable as exc:
            layers.lack("seccomp", note=f"no system-call filter ({exc})")
            return None
        self._seccomp = True
        return seccomp_fd

    def _paths_to_hide(self, python_path: list[str]) -> list[str]:
        """A weak sandbox's hidden host paths: HIDDEN_PATHS but what the runner itself needs."""
        config = self.config
        needed = [os.path.realpath(p) for p in [*python_path, str(self.workdir), config.python, str(RUNNER_PATH.parent)]]
        return [t for t in _hidden_targets() if not any(n == t or n.startswith(t + os.sep) for n in needed)]

    def _environment(self, python_path: list[str]) -> dict[str, str]:
        """The runner's whole environment (nothing of the worker's)."""
        workdir = WORKDIR_IN_VIEW if self._bwrap else str(self.workdir)
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": workdir,
            "TMPDIR": "/tmp" if self._bwrap else workdir,
            "PYTHONPATH": os.pathsep.join(view_python_path(python_path) if self._bwrap else python_path),
            "PYTHONDONTWRITEBYTECODE": "1",
            # One BLAS thread: predictable CPU use, and a far smaller address space under RLIMIT_AS.
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            **self.config.conventions(),
        }

    def _argv(self, python_path: list[str], seccomp_fd: int | None) -> list[str]:
        """The runner's command line, inside bubblewrap's view when there is one."""
        config = self.config
        runner = f"{RUNNER_DIR_IN_VIEW}/{RUNNER_PATH.name}" if self._bwrap else str(RUNNER_PATH)
        argv = [config.python, "-S", "-B", runner]  # -S: skip site (.pth start-up hooks, ~40 ms)
        if config.preload:
            argv.append("--preload=" + ",".join(config.preload))
        if not self._bwrap:
            return argv
        return bwrap_argv(
            python=config.python, python_path=python_path, runner_dir=str(RUNNER_PATH.parent),
            workspace=self.workspace, isolate_network=config.isolate_network,
            browser=config.max_memory_mb == 0 or config.loopback, bwrap=config.bwrap, seccomp_fd=seccomp_fd,
        ) + argv

    def _rlimits(self) -> list[tuple[int, int]]:
        """The spawn's ceilings (load lowers them to the rollout's limits, inside the runner)."""
        config = self.config
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
        return rlimits

    def _spawn_facts(self, layers: IsolationLayers) -> dict:
        facts = {
            "backend": self.backend, "uid": self.uid, "uid_switched": self.uid_switched, "notes": layers.notes,
            "isolation": {
                "filesystem_view": self._bwrap,
                "pid_namespace": self._bwrap,
                "seccomp": self._seccomp,  # the system-call filter (runs/sandbox/seccomp.py)
                "cgroup": f"v{self.cgroup.version}" if self.cgroup is not None else None,
                "disk_quota_mb": self.workspace.quota_mb,
                "weak_layers": layers.weak,
            },
        }
        if self.hidden:
            facts["filesystem_hidden"] = self.hidden
        return facts

    # -- limits, exits ----------------------------------------------------------------------------

    def _bound_limits(self, limits: SandboxLimits) -> None:
        if self.cgroup is not None:
            # The whole tree's bound: memory_mb (plus headroom), nproc processes, over all of them.
            self.cgroup.limit(memory_mb=limits.memory_mb + MEMORY_HEADROOM_MB, pids=limits.nproc + PIDS_HEADROOM)

    def _killed_for_memory(self) -> bool:
        return self.cgroup is not None and bool(self.cgroup.oom_kills())

    def _describe_exit(self, returncode: int | None, killed_by_us: bool) -> str:
        if returncode is not None and 128 < returncode < 128 + 65 and self.facts.get("isolation", {}).get("filesystem_view"):
            returncode = -(returncode - 128)  # bwrap reports a signal death of its child as 128 + signal
        return super()._describe_exit(returncode, killed_by_us)

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

    # -- teardown ---------------------------------------------------------------------------------

    def interrupt(self) -> None:
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
        self._close_pipes()

    def _release_backend(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
