"""Shared-sandbox episodes: up to N episodes of one version in one sandbox process (environment.toml
`concurrent_sessions = N`), each with its own instance of the entrypoint class inside the runner.

`SharedSandbox` owns one loaded env-mode sandbox and hands out `EpisodeLease`s, which present what
the episode service reads of any Sandbox (base.EPISODE_SURFACE: reset, step, verify, close,
interrupt, facts, tools, label...).
The runner answers one request at a time, so calls from many threads take turns on one lock. A call
over its timeout kills the process (the runner cannot be interrupted), and a dead process ends every
lease of it with the reason; other processes carry on. `SharedSandboxes` is the registry: it finds a
process with a free slot for the same team, version and limits, or starts one, and stops a process
once its last lease has closed.

    lease = shared_sandboxes.lease(key=SharedKey(team_id=1, content_hash=h, label="counter@1"),
                                   files=files, entrypoint="env:Counter", limits=limits, capacity=64)
    observation = lease.reset(task, seed)
    observation, reward, terminated, truncated, info = lease.step(action)
    lease.close()

Where code expects an unstarted sandbox (episode_start), `shared_sandboxes.sandbox(key=..., capacity=64)`
gives a lease whose `start(files, mode="env", entrypoint=..., limits=...)` takes the slot.
"""

import atexit
import concurrent.futures
import dataclasses
import functools
import itertools
import logging
import os
import threading
import time
from typing import Any

from .backends import sandbox_for
from .errors import SandboxCrashed, SandboxError, SandboxTimeout, UserCodeError
from .config import DEFAULT_CONFIG, SandboxConfig, SandboxLimits, StepResult

logger = logging.getLogger(__name__)

# A process that has used this share of its CPU-time limit takes no new episodes (RLIMIT_CPU counts
# its whole life, so a long-lived shared process would otherwise be killed mid-episode one day).
RETIRE_AT_CPU_SHARE = 0.5
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Sandboxes get PR_SET_PDEATHSIG, which fires when the *thread* that forked them ends. A shared process
# outlives the episode (and thread) that asked for it, so every one is started from this one thread.
_starter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="shared-sandbox-start")
_closing = threading.Lock()


class SharedSandboxFull(SandboxError):
    """Every slot of the shared sandbox is leased."""


@dataclasses.dataclass(frozen=True)
class SharedKey:
    """What may share a process: one version (by content hash) of one team. `label` ("counter@1")
    only names the process in messages."""

    team_id: int
    content_hash: str
    label: str = dataclasses.field(default="", compare=False)


class SharedSandbox:
    """One sandbox process serving up to `capacity` episodes; `start()`, then `lease()` per episode."""

    def __init__(
        self,
        *,
        files: dict,
        entrypoint: str,
        limits: SandboxLimits | dict | None = None,
        capacity: int,
        label: str = "",
        backend: str = "process",
        config: SandboxConfig = DEFAULT_CONFIG,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        if not isinstance(limits, SandboxLimits):
            limits = SandboxLimits.from_dict(limits)
        if limits.browser:
            raise ValueError("browser environments get one sandbox per episode: they cannot share one")
        self.capacity = capacity
        self.limits = limits
        self.files = files
        self.entrypoint = entrypoint
        self.sandbox = sandbox_for(backend, config)
        self.label = label or entrypoint
        self.on_empty = None  # called (with this sandbox) whenever its last lease closes
        self._leases: dict[str, EpisodeLease] = {}
        self._ids = itertools.count(1)
        self._slots = threading.Lock()  # the lease table; never held during a protocol call
        self._calls = threading.Lock()  # one protocol request at a time
        self._start_lock = threading.Lock()
        self._started = False
        self._start_error: BaseException | None = None
        self._fault: str | None = None  # why the process is gone, told to every lease from then on
        self._cpu_limit_s = limits.cpu_s or config.max_cpu_s

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> "SharedSandbox":
        """Spawn and load the process (once; concurrent callers wait for the first one's outcome)."""
        with self._start_lock:
            if self._start_error is not None:
                raise self._start_error
            if not self._started:
                # The process outlives many episodes: its CPU-time limit is the spawn ceiling, not one
                # episode's budget, unless the limits name one (see RETIRE_AT_CPU_SHARE).
                runner_limits = dataclasses.replace(self.limits, cpu_s=self._cpu_limit_s)
                try:
                    _starter.submit(
                        self.sandbox.start, self.files, mode="env", entrypoint=self.entrypoint, limits=runner_limits
                    ).result()
                except BaseException as exc:
                    self._start_error = exc
                    self._fault = f"the shared sandbox of {self.label} did not start: {exc}"
                    self.sandbox.close()
                    raise
                self.sandbox.facts["limits"] = dataclasses.asdict(self.limits) | {
                    "applied": self.sandbox.facts.get("limits", {}).get("applied")
                }
                self._started = True
        return self

    def lease(self, *, episode: str | None = None) -> "EpisodeLease":
        """A slot for one episode (its environment instance is made at its first reset)."""
        lease = EpisodeLease()
        self.admit(lease, episode=episode)
        return lease

    def admit(self, lease: "EpisodeLease", *, episode: str | None = None) -> None:
        """Give `lease` (not started yet) a slot here."""
        with self._slots:
            if self._fault is not None:
                raise SandboxCrashed(self._fault)
            if len(self._leases) >= self.capacity:
                raise SharedSandboxFull(
                    f"the shared sandbox of {self.label} is full: all {self.capacity} episode slots are in use"
                )
            episode = episode or f"e{next(self._ids)}"
            if episode in self._leases:
                raise ValueError(f"episode {episode!r} already has a lease in the shared sandbox of {self.label}")
            lease.group, lease.episode, lease.limits = self, episode, self.limits
            self._leases[episode] = lease

    def close(self) -> None:
        """Stop the process; leases still open get an error naming this at their next call."""
        with self._slots:
            if self._fault is None:
                self._fault = f"the shared sandbox of {self.label} was closed"
        with self._calls:  # waits for a call in flight (bounded by its timeout)
            self.sandbox.close()

    @property
    def in_use(self) -> int:
        return len(self._leases)

    @property
    def accepting(self) -> bool:
        """Alive, not full and not retired: may take another episode."""
        return len(self._leases) < self.capacity and self.alive and not self.retired

    @property
    def retired(self) -> bool:
        """Takes no new episodes once it has used much of its CPU-time limit (it stops when emptied)."""
        used = self.cpu_seconds()
        return used is not None and used >= RETIRE_AT_CPU_SHARE * self._cpu_limit_s

    @property
    def alive(self) -> bool:
        return self._fault is None and (not self._started or self.sandbox.alive)

    @property
    def fault(self) -> str | None:
        """Why the process is gone (None while it serves)."""
        return self._fault

    @property
    def pid(self) -> int | None:
        return self.sandbox.pid

    def cpu_seconds(self) -> float | None:
        """CPU time the runner process has used (None before start or where /proc cannot say)."""
        pid = self.sandbox.pid if self._started and self.sandbox.backend == "process" else None
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

    # -- calls on behalf of leases -------------------------------------------------------------

    def request(self, lease: "EpisodeLease", op: str, timeout: float, **fields) -> Any:
        """One request for `lease`'s episode. A timeout or crash ends the process for every lease."""
        with self._calls:
            if self._fault is not None:
                raise SandboxCrashed(self._fault)
            if not self._started:
                raise SandboxError(f"the shared sandbox of {self.label} is not started")
            try:
                return self.sandbox.call(op, timeout, episode=lease.episode, **fields)
            except SandboxTimeout as exc:
                # The runner is still busy with this call and cannot be interrupted: it was killed.
                self._fault = f"the shared sandbox of {self.label} was stopped: episode {lease.episode}: {exc}"
                others = len(self._leases) - 1
                raise SandboxTimeout(
                    f"{exc}; the shared sandbox of {self.label} was stopped with it"
                    + (f", ending {others} other episode{'s' if others != 1 else ''}" if others > 0 else "")
                ) from None
            except SandboxCrashed as exc:
                cause = str(exc).removeprefix(f"{self.sandbox.label} {op}(): ")
                self._fault = (
                    f"the shared sandbox of {self.label} died: {cause} (during episode {lease.episode}'s {op}())"
                )
                raise SandboxCrashed(self._fault) from None

    def release(self, lease: "EpisodeLease") -> None:
        """End the lease's episode in the runner (when the process still serves) and free its slot."""
        try:
            if self._fault is None and lease.reset_sent:
                self.request(lease, "end", self.limits.step_timeout_s)
        except UserCodeError as exc:
            logger.info("close() of episode %s in the shared sandbox of %s raised: %s", lease.episode, self.label, exc)
        except SandboxError:
            pass  # the process is gone; its other leases are told at their next call
        finally:
            with self._slots:
                self._leases.pop(lease.episode, None)
                empty = not self._leases
        if empty and self.on_empty is not None:
            self.on_empty(self)

    def facts_for(self, lease: "EpisodeLease") -> dict:
        return {**self.sandbox.facts, "shared": True, "capacity": self.capacity, "episode": lease.episode}


class EpisodeLease:
    """One episode's slot in a SharedSandbox, used like an env-mode Sandbox (base.EPISODE_SURFACE).

    From `SharedSandboxes.lease()` (or `SharedSandbox.lease()`) it comes started; from
    `SharedSandboxes.sandbox()` it comes unstarted, and `start(files, mode="env", entrypoint=..., limits=...)`
    takes the slot, as Sandbox.start loads a process (`spawn()` is a no-op: shared processes
    are spawned on a thread of their own).

    Time limits are the episode's own: each call has step_timeout_s (verify its `timeout`), and the
    episode deadline (episode_timeout_s from reset; lifted by verify(timeout=...) or by setting
    `_episode_deadline = None`, as on a Sandbox) is checked before and after each call. A call
    cannot be cut short without killing the process, so a lease past its deadline mid-call hears of
    it when the call ends.
    """

    mode = "env"

    def __init__(self, take_slot=None, backend: str = "process"):
        self.group: SharedSandbox | None = None
        self.episode: str | None = None
        self.limits = SandboxLimits()
        self._take_slot = take_slot  # (lease, files, entrypoint, limits): gives it a group
        self._backend = backend
        self.action_space: dict | None = None
        self.observation_space: dict | None = None
        self.last_artifact: dict | None = None
        self.reset_info: dict = {}
        self.action_schema: dict | None = None  # the environment's `action_schema` (reported at reset)
        self.env_state: dict | None = None  # the environment's `state()` after its last reset or step
        self.observation_error: str | None = None
        self.reset_sent = False  # the runner may hold an instance for this episode (reset may have raised)
        self.was_reset = False
        self._episode_deadline: float | None = None
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    def spawn(self) -> "EpisodeLease":
        return self

    def start(self, files, mode: str = "env", entrypoint: str = "env:Environment", limits=None) -> dict:
        """Take a slot in a process of this version (starting one when all are full); returns the facts."""
        if mode != "env":
            raise ValueError(f"a shared sandbox serves environments (mode 'env'), not {mode!r}")
        if self.group is not None:
            raise SandboxError("this lease is already started")
        if self._take_slot is None or self._closed:
            raise SandboxError("this lease cannot be started: take one from SharedSandboxes.sandbox()")
        self._take_slot(self, files=files, entrypoint=entrypoint, limits=limits)
        return self.facts

    @property
    def facts(self) -> dict:
        return self.group.facts_for(self) if self.group is not None else {}

    @property
    def label(self) -> str:
        """The environment's file ("env.py"), as in a Sandbox's messages."""
        return self.group.sandbox.label if self.group is not None else "sandbox"

    @property
    def tools(self) -> list | None:
        return self.group.sandbox.tools if self.group is not None else None

    @property
    def backend(self) -> str:
        return self.group.sandbox.backend if self.group is not None else self._backend

    @property
    def alive(self) -> bool:
        return not self._closed and self.group is not None and self.group.alive

    @property
    def pid(self) -> int | None:
        return self.group.pid if self.group is not None else None

    # -- protocol calls ---------------------------------------------------------------------------

    def reset(self, task: dict, seed: int | None) -> Any:
        self._check_open("reset")
        self._episode_deadline = time.monotonic() + self.limits.episode_timeout_s
        self.reset_sent = True
        result = self.group.request(self, "reset", self.limits.step_timeout_s, task=task, seed=seed)
        self.was_reset = True
        self._check_deadline("reset")
        self.action_space, self.observation_space = result.get("action_space"), result.get("observation_space")
        self.last_artifact = result.get("artifact")
        self.reset_info = result.get("info") or {}
        self.action_schema, self.env_state = result.get("action_schema"), result.get("state")
        return result["observation"]

    def step(self, action: Any) -> StepResult:
        self._check_ready("step")
        self.last_artifact = None
        result = self.group.request(self, "step", self.limits.step_timeout_s, action=action)
        self._check_deadline("step")
        self.last_artifact = result.get("artifact")
        self.observation_error = result.get("observation_error")
        self.env_state = result.get("state")
        return StepResult(result["observation"], result["reward"], result["terminated"], result["truncated"], result["info"])

    def verify(self, timeout: float | None = None) -> tuple[float | None, str]:
        """Judge the final state. A given `timeout` is the verifier's own budget: the episode clock,
        which may have run out while the agent acted, does not cut it short."""
        if timeout is not None:
            self._episode_deadline = None
        self._check_ready("verify")
        result = self.group.request(self, "verify", timeout if timeout is not None else self.limits.step_timeout_s)
        self._check_deadline("verify")
        return result["reward"], result["reason"]

    def interrupt(self) -> None:
        """A cancel from another thread kills nothing here: the process serves other episodes too.
        This episode ends at its next call, when its driver sees the interruption."""

    def close(self) -> None:
        """End the episode and free its slot (its environment instance too); closing twice is fine."""
        with _closing:  # two threads closing at once: one ends the episode
            if self._closed:
                return
            self._closed = True
        if self.group is not None:
            self.group.release(self)

    def __enter__(self) -> "EpisodeLease":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise SandboxCrashed(f"{self.label} {op}(): the episode's lease on the shared sandbox is closed")
        if self.group is None:
            raise SandboxError(f"{op}() before start()")

    def _check_ready(self, op: str) -> None:
        # Checked here: a request for an episode the runner never reset would be a protocol violation,
        # and the runner's protocol violations end the whole process.
        self._check_open(op)
        if not self.was_reset:
            raise SandboxError(f"{op}() before reset()")
        self._check_deadline(op)

    def _check_deadline(self, op: str) -> None:
        if self._episode_deadline is not None and time.monotonic() > self._episode_deadline:
            raise SandboxTimeout(
                f"{self.label} episode did not finish within episode_timeout_s={self.limits.episode_timeout_s:g} s"
                f" (during {op}())"
            )


class SharedSandboxes:
    """Shared sandboxes by (team, version, entrypoint, limits, capacity, backend): a lease goes to a
    process of that key with a free slot, or a new one; a process stops when its last lease closes
    (after `idle_s` without a new lease, when that is above 0)."""

    def __init__(self, *, idle_s: float = 0.0, config: SandboxConfig = DEFAULT_CONFIG):
        self.idle_s = idle_s
        self.config = config
        self._groups: dict[tuple, list[SharedSandbox]] = {}
        self._lock = threading.Lock()
        self._timers: dict[int, threading.Timer] = {}

    def sandbox(
        self, *, key: SharedKey, capacity: int, backend: str = "process", episode: str | None = None,
        config: SandboxConfig | None = None,
    ) -> EpisodeLease:
        """An unstarted lease, to use as an unstarted Sandbox: its `start(files, mode="env",
        entrypoint=..., limits=...)` takes a slot in a process of this key with room, or starts one."""
        if not isinstance(key, SharedKey):
            raise TypeError("key must be a SharedKey (a process only ever serves one version of one team)")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        take_slot = functools.partial(self._take_slot, key=key, capacity=capacity, backend=backend, episode=episode,
                                      config=config or self.config)
        return EpisodeLease(take_slot, backend=backend)

    def lease(
        self,
        *,
        key: SharedKey,
        files: dict,
        entrypoint: str,
        limits: SandboxLimits | dict | None,
        capacity: int,
        backend: str = "process",
        episode: str | None = None,
    ) -> EpisodeLease:
        """A started lease on a process of this key with a free slot, starting one when all are full."""
        lease = self.sandbox(key=key, capacity=capacity, backend=backend, episode=episode)
        lease.start(files, entrypoint=entrypoint, limits=limits)
        return lease

    def _take_slot(self, lease, *, key, capacity, backend, episode, config, files, entrypoint, limits) -> None:
        if not isinstance(limits, SandboxLimits):
            limits = SandboxLimits.from_dict(limits)
        group_key = (key, entrypoint, limits, capacity, backend, config)
        with self._lock:
            groups = self._groups.setdefault(group_key, [])
            group = next((group for group in groups if group.accepting), None)
            if group is None:
                group = SharedSandbox(
                    files=files, entrypoint=entrypoint, limits=limits, capacity=capacity,
                    label=key.label, backend=backend, config=config,
                )
                group.on_empty = self._emptied
                groups.append(group)
            group.admit(lease, episode=episode)
            self._cancel_timer(group)
        try:
            group.start()
        except BaseException:
            lease.close()
            with self._lock:
                self._forget(group)
            raise

    def groups(self) -> list[SharedSandbox]:
        """Every process this registry holds (for benches, tests and status pages)."""
        with self._lock:
            return [group for groups in self._groups.values() for group in groups]

    def close_all(self) -> None:
        with self._lock:
            groups = [group for groups in self._groups.values() for group in groups]
            self._groups.clear()
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
        for group in groups:
            group.close()

    # -- emptied processes ---------------------------------------------------------------------

    def _emptied(self, group: SharedSandbox) -> None:
        with self._lock:
            if group.in_use:
                return  # another episode took a slot meanwhile
            if self.idle_s > 0 and group.alive and not group.retired:
                timer = threading.Timer(self.idle_s, self._stop_if_idle, args=(group,))
                timer.daemon = True
                self._cancel_timer(group)
                self._timers[id(group)] = timer
                timer.start()
                return
            stopped = self._forget(group)
        if stopped:
            group.close()

    def _stop_if_idle(self, group: SharedSandbox) -> None:
        with self._lock:
            if self._timers.get(id(group)) is not threading.current_thread():
                return  # cancelled while it waited for the lock, or a later timer replaced it
            stopped = not group.in_use and self._forget(group)
        if stopped:
            group.close()

    def _forget(self, group: SharedSandbox) -> bool:
        """Drop the group from the registry (the lock is held); True when it was there."""
        self._cancel_timer(group)
        for group_key, groups in self._groups.items():
            if group in groups:
                groups.remove(group)
                if not groups:
                    del self._groups[group_key]
                return True
        return False

    def _cancel_timer(self, group: SharedSandbox) -> None:
        timer = self._timers.pop(id(group), None)
        if timer is not None:
            timer.cancel()


# The process-wide registry (workers and episode hosts lease from it). An emptied process waits a
# little for the next episode of its version, which then skips a start; all are stopped at exit.
shared_sandboxes = SharedSandboxes(idle_s=2.0)
atexit.register(shared_sandboxes.close_all)
