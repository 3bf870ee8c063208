"""The `Sandbox` every backend is: one runner.py process driven over its stdin/stdout pipes.

This base owns what every backend shares: the conversation with the runner (call, exchange, send,
receive, the stderr tail, timeouts and crash descriptions), writing the package's files into the
workspace, the protocol calls (start/load, reset, step, verify, act, close) and the attributes the
episode service reads (facts, tools, reset_info, last_artifact, observation_error, the spaces, the
action schema, env_state, label, backend), always present, before start too. It also holds the spawn
steps that are the same everywhere (a uid slot, a workspace, refusing a weak sandbox). A backend
(process.py, docker.py) only says how to launch the runner (`_launch`), what its facts are, and how
to kill it (`_kill`, `interrupt`). Backends are siblings: none subclasses another.
"""

import abc
import ctypes
import ctypes.util
import dataclasses
import errno
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from . import protocol
from .config import DEFAULT_CONFIG, SandboxConfig, SandboxLimits, StepResult, allow_weak_setting
from .errors import SandboxCrashed, SandboxError, SandboxProtocolError, SandboxTimeout, UserCodeError
from .secrets import version_seed_secret
from .uids import UidSlot, acquire_uid_slot
from .view import Workspace

STDERR_TAIL_BYTES = 16 * 1024
PROTOCOL_PIPE_BYTES = 1 << 20
PR_SET_PDEATHSIG = 1

_libc_name = ctypes.util.find_library("c")
LIBC = ctypes.CDLL(_libc_name, use_errno=True) if _libc_name else None

# What the episode service reads of any sandbox it drives (a Sandbox, or a shared sandbox's lease):
# attributes and methods every one has, started or not.
EPISODE_SURFACE = (
    "backend", "label", "mode", "limits", "facts", "tools", "reset_info", "last_artifact", "observation_error",
    "observation_space", "action_space", "action_schema", "env_state", "alive", "pid",
    "start", "reset", "step", "verify", "close", "interrupt",
)


def die_with_parent() -> None:
    """In a child between fork and exec: SIGKILL it when the thread that forked it ends."""
    if LIBC is not None:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def check_sandbox_root(root: Path) -> None:
    """Where workspaces and uid locks live: created if missing; owned by us and writable by nobody else."""
    root.mkdir(mode=0o711, exist_ok=True)
    info = root.lstat()
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxError(f"{root} must be owned by uid {os.geteuid()} and writable by nobody else")


def validated_relative(name: str) -> Path:
    """A package file name as a path inside the workspace (no absolute path, no `..`)."""
    path = Path(name)
    if not name or path.is_absolute() or any(part in ("", ".", "..") for part in path.parts):
        raise ValueError(f"bad file name in package: {name!r}")
    return path


def entry_label(mode: str, entrypoint: str) -> str:
    """How messages name the sandboxed code: "env.py", "agent.py", "gymnasium:FrozenLake-v1"."""
    if entrypoint.startswith("gymnasium:"):
        return entrypoint
    module = entrypoint.partition(":")[0] or ("agent" if mode == "agent" else "env")
    return module if module.endswith(".py") else f"{module}.py"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclasses.dataclass
class IsolationLayers:
    """What a spawn could not provide: `weak` names the missing layers, `notes` say why."""

    weak: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def lack(self, *layers: str, note: str) -> None:
        self.weak.extend(layers)
        self.notes.append(note)


class Sandbox(abc.ABC):
    """One sandboxed runner: `start` (or `spawn` + `load`), then reset/step/verify or reset/act, close.

    with sandbox_for("process") as env:
        env.start(files, mode="env", entrypoint="env:Maze", limits=SandboxLimits(step_timeout_s=2))
        observation = env.reset({"id": "t1"}, seed=0)
        observation, reward, terminated, truncated, info = env.step(action)
    """

    backend: str  # the backend's name ("process", "docker"), as settings.SANDBOX_BACKEND names it
    # Said when the host is not root: the sandbox then runs as `_unswitched_uid()`.
    unswitched_note = "host is not root: sandbox runs as the worker's own uid (no uid switch)"
    unbounded_disk_note = "no size-limited workspace: what the sandbox writes is not bounded"

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
        self.pooled = False
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
        self._proc: subprocess.Popen | None = None
        self._slot: UidSlot | None = None
        self._buffer = bytearray()
        self._stderr_tail = bytearray()
        self._stderr_open = False
        self._killed_by_us = False
        self._closed = False
        self._episode_deadline: float | None = None
        self._dead = False

    # -- what a backend provides ----------------------------------------------------------------

    @abc.abstractmethod
    def _launch(self, layers: IsolationLayers) -> subprocess.Popen:
        """Start the runner (uid slot and workspace are taken) with its stdin, stdout and stderr as
        pipes; note missing layers in `layers` and call `_refuse_if_weak` before starting anything."""

    @abc.abstractmethod
    def _spawn_facts(self, layers: IsolationLayers) -> dict:
        """The facts known once the runner is launched (backend, uid, isolation...)."""

    @abc.abstractmethod
    def _kill(self) -> None:
        """SIGKILL everything of the sandbox and reap it; close the pipes. Must set `_dead`."""

    @abc.abstractmethod
    def interrupt(self) -> None:
        """Kill the sandbox's processes from any thread (a cancel): the thread waiting in a call sees
        the pipe close and raises SandboxCrashed, then tears the sandbox down as usual. Only signals
        are sent here; pipes, workdir and uid slot stay for the waiting thread to release."""

    def _prepare(self) -> None:
        """Before the uid slot is taken: what the backend needs first (an image)."""

    def _unswitched_uid(self) -> int:
        """The uid the sandbox runs as when the host is not root."""
        return os.getuid()

    def _bound_limits(self, limits: SandboxLimits) -> None:
        """At load: bound the whole process tree to the rollout's limits, where the backend can."""

    def _release_backend(self) -> None:
        """At teardown, after the workspace is gone: what else the backend holds (a cgroup)."""

    def _killed_for_memory(self) -> bool:
        """Whether the kernel's out-of-memory killer stopped the sandbox (where the backend can tell)."""
        return False

    # -- lifecycle ------------------------------------------------------------------------------

    def spawn(self) -> "Sandbox":
        """Start the runner (interpreter up, waiting for `load`), in a fresh empty workspace."""
        if self._proc is not None:
            raise SandboxError("sandbox already started")
        check_sandbox_root(self.config.root)
        layers = IsolationLayers()
        try:
            self._prepare()
            self._take_uid_slot(layers)
            self._make_workspace(layers)
            self._proc = self._launch(layers)
        except BaseException:
            self._release()
            raise
        self._attach_pipes()
        self.facts = self._spawn_facts(layers)
        return self

    def _take_uid_slot(self, layers: IsolationLayers) -> None:
        """As root, a uid of its own (a slot no other sandbox on this host holds)."""
        if os.geteuid() == 0:
            self._slot = acquire_uid_slot(self.config)
            self.uid = self._slot.uid
            self.uid_switched = True
        else:
            self.uid = self._unswitched_uid()
            layers.lack("uid_switch", note=self.unswitched_note)

    def _make_workspace(self, layers: IsolationLayers) -> None:
        """The sandbox's size-limited scratch space (view.py), owned by its uid."""
        self.workspace = Workspace.create(self.config.root, uid=self.uid if self.uid_switched else None,
                                          quota_mb=self.config.disk_mb)
        self.workdir = self.workspace.work
        if self.workspace.quota_mb is None:
            layers.lack("disk_quota", note=self.unbounded_disk_note)

    def _refuse_if_weak(self, layers: IsolationLayers) -> None:
        if not layers.weak:
            return
        allowed = self.config.allow_weak
        if allowed is None:
            allowed = allow_weak_setting()
        if not allowed:
            raise SandboxError(
                "refusing to run untrusted code in a weak sandbox: this host does not provide "
                + ", ".join(layer.replace("_", " ") for layer in layers.weak)
                + " (an operator may allow it with SANDBOX_ALLOW_WEAK=true)"
            )

    def _attach_pipes(self) -> None:
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            os.set_blocking(stream.fileno(), False)
        self._stderr_open = True

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
        self.label = entry_label(mode, entrypoint)
        try:
            self._bound_limits(limits)
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

    def __enter__(self) -> "Sandbox":
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

    @property
    def alive(self) -> bool:
        return self._proc is not None and not self._closed and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The host pid of the process this sandbox launched (None before spawn)."""
        return self._proc.pid if self._proc is not None else None

    def stderr_tail(self) -> str:
        """The last few KB the sandbox wrote to stderr (user prints included), for logs."""
        return self._stderr_tail.decode("utf-8", "replace")

    # -- protocol calls -------------------------------------------------------------------------

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
        """Why the runner is gone, readably; `returncode` as Popen reports it (negative: a signal)."""
        limits = self.limits
        if returncode is None:
            reason = "sandbox closed its protocol pipe"
        elif returncode < 0:
            name = signal_name(-returncode)
            if name == "SIGKILL" and not killed_by_us:
                reason = f"sandbox process was killed (SIGKILL), most likely out of memory (memory_mb={limits.memory_mb})"
                if self._killed_for_memory():
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
        last = self._last_stderr_line()
        if last:
            reason += f"; last stderr line: {last}"
        return reason

    def _last_stderr_line(self) -> str:
        last = [line for line in self.stderr_tail().splitlines() if line.strip()]
        return last[-1][-300:] if last else ""

    # -- files and teardown ---------------------------------------------------------------------

    def _write_files(self, files: dict) -> None:
        uid = self.uid if self.uid_switched else None
        for name, content in files.items():
            relative = validated_relative(name)
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

    def _close_pipes(self) -> None:
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
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
        self._release_backend()
        if self._slot is not None:
            self._slot.release()
            self._slot = None
