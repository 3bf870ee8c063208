"""The `docker` sandbox backend: the same runner.py, in a container, driven over `docker run -i`.

The container has no network (`--network none`), a read-only root (the image from docker_image.py:
Debian's interpreter, its standard library, numpy and Gymnasium; no shell), small tmpfs mounts for
/tmp, /var/tmp and /dev/shm, memory (for the whole container), CPU and process-count limits in its
cgroup, its own PID and IPC namespaces, no capabilities, no-new-privileges, and an init (`--init`)
that reaps what user code forks. The runner and the SDK are bind-mounted read-only and nothing else
of the host; the sandbox's workspace (the same size-limited tmpfs as the process backend's, view.py)
is mounted at /work.

As root the container runs under a per-sandbox uid slot (the Sandbox base's step, as for the process
backend), so the runner's rlimits (RLIMIT_NPROC is per uid) bind each sandbox alone, and teardown
can SIGKILL every process of the container from the host at once; `docker kill` is the fallback.
stdin/stdout of `docker run -i` carry the protocol, stderr the sandbox's stderr, exactly as with a
local process: everything above the launch (calls, timeouts, crash reasons) is the base's (base.py).
"""

import os
import signal
import subprocess
import uuid

from . import docker_image
from .base import IsolationLayers, Sandbox, die_with_parent
from .config import DEFAULT_CONFIG, MEMORY_HEADROOM_MB, RUNNER_PATH, SDK_PATH, SandboxConfig, SandboxLimits
from .uids import kill_uid_processes

PROTOCOL_PATH = RUNNER_PATH.with_name("protocol.py")
DOCKER = os.environ.get("STUDIO_DOCKER", "docker")
CONTAINER_PREFIX = "studio-sb-"
NOBODY = 65534
TMPFS_MB = 16  # each of /tmp, /var/tmp and /dev/shm
LABEL = "studio.sandbox=1"

_image_cache: dict[tuple, str] = {}


def sandbox_image(docker: str = DOCKER) -> str:
    """The runtime image (built on first use in this process, then cached by its content tag)."""
    key = (docker,)
    if key not in _image_cache:
        _image_cache[key] = docker_image.ensure_image(docker=docker)
    return _image_cache[key]


class DockerSandbox(Sandbox):
    """A Sandbox whose runner is in a locked-down container (a sibling of ProcessSandbox)."""

    backend = "docker"
    unswitched_note = "host is not root: the container runs as nobody and the workdir is world-writable"
    unbounded_disk_note = "no size-limited workspace: what the sandbox writes to /work is not bounded"

    def __init__(self, config: SandboxConfig = DEFAULT_CONFIG, *, image: str | None = None, docker: str = DOCKER):
        super().__init__(config)
        self.docker = docker
        self.image = image
        self.container: str | None = None
        self._spawn_limits: SandboxLimits | None = None

    def start(self, files, mode="env", entrypoint="env:Environment", limits=None) -> dict:
        # Known before the spawn: the container's cgroup gets the rollout's own memory limit.
        if self._proc is None:
            self._spawn_limits = limits if isinstance(limits, SandboxLimits) else SandboxLimits.from_dict(limits)
        return super().start(files, mode=mode, entrypoint=entrypoint, limits=limits)

    # -- spawn, step by step (the uid slot and the workspace are the base's) -------------------

    def _prepare(self) -> None:
        self.image = self.image or sandbox_image(self.docker)

    def _unswitched_uid(self) -> int:
        return NOBODY  # the container still runs as nobody; the host-side workdir is opened up for it

    def _launch(self, layers: IsolationLayers) -> subprocess.Popen:
        if not self.uid_switched:
            os.chmod(self.workspace.path, 0o777)
            os.chmod(self.workdir, 0o777)
        self._refuse_if_weak(layers)
        self.container = CONTAINER_PREFIX + uuid.uuid4().hex[:16]
        return subprocess.Popen(
            self._docker_argv(self.image, self.uid),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")},
            close_fds=True,
            start_new_session=True,
            # The docker client dies with the worker; its stdin closing then ends the runner (EOF on the pipe).
            preexec_fn=die_with_parent,
        )

    def _spawn_facts(self, layers: IsolationLayers) -> dict:
        return {
            "backend": self.backend,
            "uid": self.uid,
            "uid_switched": self.uid_switched,
            "image": self.image,
            "container": self.container,
            "notes": layers.notes,
            "isolation": {
                "filesystem_view": True,
                "pid_namespace": True,
                "cgroup": "docker",
                "disk_quota_mb": self.workspace.quota_mb,
                "weak_layers": layers.weak,
            },
        }

    def _docker_argv(self, image: str, gid: int) -> list[str]:
        config = self.config
        limits = self._spawn_limits
        memory_mb = (limits.memory_mb + MEMORY_HEADROOM_MB) if limits else config.max_memory_mb
        nproc = limits.nproc if limits else config.nproc
        fsize = (limits.fsize_mb if limits else config.fsize_mb) * 1024 * 1024
        cpu_s = limits.effective_cpu_s + 5 if limits else config.max_cpu_s
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": docker_image.WORKDIR_IN_IMAGE,
            "TMPDIR": docker_image.WORKDIR_IN_IMAGE,
            "PYTHONPATH": ":".join([docker_image.SDK_IN_IMAGE, *(self._dependency_paths() or [docker_image.SITE_PACKAGES_IN_IMAGE])]),
            "PYTHONDONTWRITEBYTECODE": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            **config.conventions(),
        }
        runner_dir = docker_image.RUNNER_DIR_IN_IMAGE
        argv = [
            self.docker, "run", "-i", "--rm",
            "--name", self.container,
            "--label", LABEL,
            "--log-driver", "none",  # the protocol and stderr are attached streams; keep nothing on disk
            "--network", "none",
            "--read-only",
            "--tmpfs", f"/tmp:rw,nosuid,nodev,noexec,size={TMPFS_MB}m,mode=1777",
            "--tmpfs", f"/var/tmp:rw,nosuid,nodev,noexec,size={TMPFS_MB}m,mode=1777",
            "--shm-size", f"{TMPFS_MB}m",
            "--ipc", "private",
            "--memory", f"{memory_mb}m",
            "--memory-swap", f"{memory_mb}m",
            "--cpus", "1",
            # The cgroup cap counts the container's own processes (init included); RLIMIT_NPROC the uid's.
            "--pids-limit", str(nproc + 4),
            "--ulimit", f"nproc={nproc}:{nproc}",
            "--ulimit", f"fsize={fsize}:{fsize}",
            "--ulimit", f"nofile={config.nofile}:{config.nofile}",
            "--ulimit", f"cpu={cpu_s}:{cpu_s + 1}",
            "--ulimit", "core=0:0",
            "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges",
            "--init",
            "--user", f"{self.uid}:{gid}",
            "--hostname", "sandbox",
            "-v", f"{self.workdir}:{docker_image.WORKDIR_IN_IMAGE}",
            "-v", f"{RUNNER_PATH}:{runner_dir}/runner.py:ro",
            "-v", f"{PROTOCOL_PATH}:{runner_dir}/protocol.py:ro",
            "-v", f"{SDK_PATH}:{docker_image.SDK_IN_IMAGE}:ro",
            "-w", docker_image.WORKDIR_IN_IMAGE,
        ]
        for path in self._dependency_paths():  # a version's dependency environment, at the same path
            argv += ["-v", f"{path}:{path}:ro"]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        # env -u: docker always sets HOSTNAME; the sandbox's environment is exactly the list above.
        argv += [image, "/usr/bin/env", "-u", "HOSTNAME", docker_image.PYTHON_IN_IMAGE, "-S", "-B", f"{runner_dir}/runner.py"]
        if config.preload:
            argv.append("--preload=" + ",".join(config.preload))
        return argv

    def _dependency_paths(self) -> list[str]:
        """The config's import path past the SDK (a version's dependency environment), if it has one."""
        if self.config.python_path is None:
            return []
        return [path for path in self.config.python_path if os.path.realpath(path) != os.path.realpath(SDK_PATH)]

    # -- files, stderr, exits ---------------------------------------------------------------------

    def _write_files(self, files: dict) -> None:
        super()._write_files(files)
        if not self.uid_switched:
            # Not root: the files are the worker's; the container's nobody must be able to read them.
            for folder, dirs, names in os.walk(self.workdir):
                for name in dirs:
                    os.chmod(os.path.join(folder, name), 0o777)
                for name in names:
                    os.chmod(os.path.join(folder, name), 0o666)

    def stderr_tail(self) -> str:
        # docker relays stderr on its own stream, a moment behind stdout: collect what is on its way.
        if self._stderr_open and self._proc is not None and not self._dead:
            self._drain_stderr(0.05)
        return super().stderr_tail()

    # -- teardown -----------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Kill the container's processes from any thread (a cancel); the waiting call sees its pipe close."""
        if self._proc is None or self._closed:
            return
        self._killed_by_us = True
        if self.uid_switched and self.uid is not None:
            kill_uid_processes(self.uid)
        else:
            self._docker_kill()

    def _kill(self) -> None:
        """SIGKILL the container's processes (from the host, by uid) or `docker kill` it; reap the client."""
        proc = self._proc
        if proc is None:
            return
        self._killed_by_us = True
        self._dead = True
        if proc.poll() is None:
            if self.uid_switched and self.uid is not None:
                kill_uid_processes(self.uid)
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._docker_kill()
                try:
                    proc.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait(timeout=5.0)
        if self.uid_switched and self.uid is not None:
            kill_uid_processes(self.uid)
        self._close_pipes()

    def _docker_kill(self) -> None:
        if not self.container:
            return
        try:
            subprocess.run([self.docker, "kill", self.container], capture_output=True, timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _describe_exit(self, returncode: int | None, killed_by_us: bool) -> str:
        # `docker run` reports a signal death as 128 + signal; 125-127 are its own failures.
        if returncode is not None and 128 < returncode < 128 + 65:
            returncode = -(returncode - 128)
        elif returncode in (125, 126, 127):
            return f"the container did not start ({self._last_stderr_line() or f'exit status {returncode}'})"
        return super()._describe_exit(returncode, killed_by_us)
