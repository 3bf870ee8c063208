"""Shared-sandbox episodes: many episodes of one version in one sandbox process, each with its own
environment instance; a fault of the process ends each of its episodes with the reason. No database."""

import os
import signal
import textwrap
import threading
import time

import pytest

from runs.sandbox import SandboxCrashed, SandboxError, SandboxLimits, SandboxTimeout, UserCodeError
from runs.sandbox.shared import SharedKey, SharedSandbox, SharedSandboxes, SharedSandboxFull

from tests.runs.conftest import COUNTER_ENV, assert_no_processes_of

# Counter, plus: a step that raises, one that hangs, one that kills the process, and a count of
# the instances alive in the process (made at load or at an episode's first reset, minus closed).
ENV = COUNTER_ENV + textwrap.dedent(
    """

    import os, time

    LIVE = set()
    PROCESS = os.urandom(8).hex()  # os.getpid() is 2 in every sandbox's own PID namespace

    class Shared(Counter):
        def __init__(self):
            LIVE.add(id(self))

        def reset(self, task, seed):
            if task.get("fail"):
                raise RuntimeError("bad task")
            observation = super().reset(task, seed)
            return {**observation, "live": len(LIVE), "process": PROCESS}

        def step(self, action):
            if action == "boom":
                raise ValueError("boom")
            if action == "hang":
                while True:
                    pass
            if action == "sleep":
                time.sleep(0.7)
                action = 0
            return super().step(action)

        def close(self):
            LIVE.discard(id(self))
    """
)
FILES = {"env.py": ENV}
KEY = SharedKey(team_id=1, content_hash="c0ffee", label="counter@1")
LIMITS = SandboxLimits(step_timeout_s=5)


@pytest.fixture
def registry():
    """A registry of its own; at the end every process it started is stopped and left nothing behind."""
    registry = SharedSandboxes()
    seen = []
    original = registry.lease

    def lease(**kwargs):
        lease = original(**{"key": KEY, "files": FILES, "entrypoint": "env:Shared", "limits": LIMITS, "capacity": 4, **kwargs})
        if lease.group not in seen:
            seen.append(lease.group)
        return lease

    registry.lease = lease
    yield registry
    registry.close_all()
    for group in seen:
        if group.sandbox.uid_switched:
            assert_no_processes_of(group.sandbox.uid)


def process_gone(pid):
    return not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_two_leases_in_one_process_keep_separate_state(registry):
    first, second = registry.lease(), registry.lease()
    assert first.group is second.group and first.episode != second.episode
    a = first.reset({"id": "t", "goal": 2}, seed=0)
    b = second.reset({"id": "t", "goal": 5}, seed=0)
    assert a["process"] == b["process"] and first.pid == second.pid
    assert (a["goal"], b["goal"]) == (2, 5)
    assert first.step(1).observation == {"n": 1}
    assert second.step(3).observation == {"n": 3}
    assert first.step(1).terminated is True
    assert first.verify() == (1.0, "n=2, goal=2")
    assert second.verify() == (0.0, "n=3, goal=5")
    assert first.label == "env.py" and first.tools == [] and first.alive
    facts = first.facts
    assert facts["shared"] is True and facts["capacity"] == 4 and facts["episode"] == first.episode
    assert facts["mode"] == "env" and facts["entrypoint"] == "env:Shared" and "network_isolated" in facts


def test_leases_share_one_sandbox_on_every_backend(registry, backend):
    first, second = registry.lease(backend=backend), registry.lease(backend=backend)
    assert first.group is second.group and first.backend == backend
    first.reset({"id": "t", "goal": 1}, seed=0)
    second.reset({"id": "t", "goal": 2}, seed=0)
    with pytest.raises(UserCodeError, match="ValueError: boom"):
        second.step("boom")
    assert first.step(1).terminated is True and second.step(1).terminated is False
    assert first.verify() == (1.0, "n=1, goal=1") and second.verify() == (0.0, "n=1, goal=2")
    assert first.facts["backend"] == backend


def test_an_unstarted_lease_starts_like_a_process_sandbox(registry):
    sandbox = registry.sandbox(key=KEY, capacity=4)
    assert sandbox.pid is None and sandbox.facts == {} and sandbox.label == "sandbox" and not sandbox.alive
    assert sandbox.spawn() is sandbox  # shared processes are spawned on a thread of their own
    with pytest.raises(SandboxError, match=r"reset\(\) before start\(\)"):
        sandbox.reset({"id": "t"}, seed=0)
    facts = sandbox.start(FILES, mode="env", entrypoint="env:Shared", limits=SandboxLimits(step_timeout_s=5, episode_timeout_s=0.3))
    assert facts["shared"] is True and sandbox.label == "env.py" and sandbox.pid is not None
    assert sandbox.reset({"id": "t", "goal": 1}, seed=0)["n"] == 0
    assert sandbox.step(1).terminated is True
    time.sleep(0.4)
    # The verifier has its own budget: the episode clock, run out meanwhile, does not cut it short.
    assert sandbox.verify(timeout=5) == (1.0, "n=1, goal=1")
    with pytest.raises(SandboxError, match="already started"):
        sandbox.start(FILES, mode="env", entrypoint="env:Shared", limits=LIMITS)
    with pytest.raises(ValueError, match="mode 'env'"):
        registry.sandbox(key=KEY, capacity=4).start(FILES, mode="agent", entrypoint="agent")
    sandbox.close()
    assert registry.groups() == []


def test_closing_a_lease_frees_its_slot_and_its_instance(registry):
    first, second = registry.lease(), registry.lease()
    # The instance made at load is alive too: 1 + one per reset episode.
    assert first.reset({"id": "t"}, seed=0)["live"] == 2
    assert second.reset({"id": "t"}, seed=0)["live"] == 3
    first.close()
    first.close()  # idempotent
    assert first.group.in_use == 1 and not first.alive
    third = registry.lease()
    assert third.group is second.group
    assert third.reset({"id": "t"}, seed=0)["live"] == 3
    with pytest.raises(SandboxCrashed, match="lease on the shared sandbox is closed"):
        first.step(1)


def test_a_reset_that_raises_still_frees_its_instance_on_close(registry):
    failing, other = registry.lease(), registry.lease()
    with pytest.raises(UserCodeError, match="RuntimeError: bad task"):
        failing.reset({"id": "t", "fail": True}, seed=0)
    failing.close()
    assert other.reset({"id": "t"}, seed=0)["live"] == 2


def test_exception_in_one_lease_leaves_the_others_working(registry):
    first, second = registry.lease(), registry.lease()
    first.reset({"id": "t"}, seed=0)
    second.reset({"id": "t"}, seed=0)
    with pytest.raises(UserCodeError, match=r"ValueError: boom \(env.py line \d+\)") as caught:
        first.step("boom")
    assert caught.value.op == "step"
    assert second.step(2).observation == {"n": 2}
    assert first.step(1).observation == {"n": 1}  # the failing episode itself goes on too
    assert first.alive and second.alive


def test_step_before_reset_is_refused_without_touching_the_process(registry):
    first, second = registry.lease(), registry.lease()
    second.reset({"id": "t"}, seed=0)
    with pytest.raises(SandboxError, match=r"step\(\) before reset\(\)"):
        first.step(1)
    assert second.step(1).observation == {"n": 1}


def test_killed_process_ends_every_lease_with_the_reason(registry):
    first, second = registry.lease(), registry.lease()
    first.reset({"id": "t"}, seed=0)
    second.reset({"id": "t"}, seed=0)
    os.kill(first.pid, signal.SIGKILL)
    reason = (
        r"^the shared sandbox of counter@1 died: sandbox process was killed \(SIGKILL\).*"
        rf"\(during episode {first.episode}'s step\(\)\)$"
    )
    with pytest.raises(SandboxCrashed, match=reason):
        first.step(1)
    with pytest.raises(SandboxCrashed, match=reason):
        second.step(1)
    with pytest.raises(SandboxCrashed, match=reason):
        second.verify()
    assert not first.alive and not second.alive
    # A new episode gets a new process, also when the death was not noticed by a call yet.
    fourth = registry.lease()
    fourth.reset({"id": "t"}, seed=0)
    os.kill(fourth.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while fourth.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    third = registry.lease()
    assert third.group is not fourth.group
    assert third.group is not first.group
    third.reset({"id": "t", "goal": 1}, seed=0)
    assert third.pid != first.pid
    assert third.step(1).terminated is True


def test_step_timeout_kills_the_process_and_ends_every_lease_with_the_cause(registry):
    limits = SandboxLimits(step_timeout_s=1)
    culprit, waiting, idle = (registry.lease(limits=limits) for _ in range(3))
    for lease in (culprit, waiting, idle):
        lease.reset({"id": "t"}, seed=0)
    pid = culprit.pid
    errors = {}

    def step_while_the_other_hangs():
        while not culprit.group._calls.locked():  # the culprit's call is in flight
            time.sleep(0.01)
        time.sleep(0.1)
        try:
            waiting.step(1)
        except SandboxError as exc:
            errors["waiting"] = exc

    thread = threading.Thread(target=step_while_the_other_hangs)
    thread.start()
    with pytest.raises(SandboxTimeout) as caught:
        culprit.step("hang")
    thread.join()
    assert str(caught.value) == (
        "env.py step() did not answer within 1.0 s; the shared sandbox of counter@1 was stopped with it, "
        "ending 2 other episodes"
    )
    assert process_gone(pid)
    cause = f"the shared sandbox of counter@1 was stopped: episode {culprit.episode}: env.py step() did not answer within 1.0 s"
    # A lease already waiting for its turn, and one that calls later, both hear why.
    assert type(errors["waiting"]) is SandboxCrashed and str(errors["waiting"]) == cause
    with pytest.raises(SandboxCrashed) as later:
        idle.step(1)
    assert str(later.value) == cause


def test_episode_deadline_is_per_lease_and_spares_the_process(registry):
    limits = SandboxLimits(step_timeout_s=5, episode_timeout_s=1.5)
    short = registry.lease(limits=limits)
    short.reset({"id": "t"}, seed=0)
    time.sleep(0.9)
    other = registry.lease(limits=limits)
    other.reset({"id": "t"}, seed=0)
    time.sleep(0.9)
    with pytest.raises(SandboxTimeout, match=r"^env.py episode did not finish within episode_timeout_s=1.5 s \(during step\(\)\)$"):
        short.step(1)
    assert other.group is short.group and other.step(1).observation == {"n": 1}
    # A call that outlives the deadline finishes, then reports it; the process keeps serving.
    with pytest.raises(SandboxTimeout, match="episode_timeout_s=1.5 s"):
        other.step("sleep")  # sleeps 0.7 s: past the deadline while in the call
    # Lifting the deadline (as the engine does before verify) lets the verifier run.
    short._episode_deadline = None
    assert short.verify() == (0.0, "n=0, goal=3")
    assert short.alive and other.group.alive


def test_full_process_refuses_a_lease_and_the_registry_starts_another(registry):
    leases = [registry.lease(capacity=2) for _ in range(3)]
    assert leases[0].group is leases[1].group and leases[2].group is not leases[0].group
    assert len({lease.reset({"id": "t"}, seed=0)["process"] for lease in leases}) == 2
    with pytest.raises(SharedSandboxFull, match="all 2 episode slots are in use"):
        leases[0].group.lease()
    # A freed slot is reused before any new process.
    leases[0].close()
    assert registry.lease(capacity=2).group is leases[1].group
    assert len(registry.groups()) == 2


def test_closing_every_lease_stops_the_process(registry):
    leases = [registry.lease() for _ in range(2)]
    for lease in leases:
        lease.reset({"id": "t"}, seed=0)
    group, pid = leases[0].group, leases[0].pid
    workdir = group.sandbox.workdir
    leases[0].close()
    assert not process_gone(pid)
    leases[1].close()
    assert process_gone(pid) and not workdir.exists()
    assert registry.groups() == []
    with pytest.raises(SandboxCrashed, match="was closed"):
        group.lease()


def test_idle_process_is_kept_for_a_while_then_stopped():
    registry = SharedSandboxes(idle_s=0.5)
    try:
        lease = registry.lease(key=KEY, files=FILES, entrypoint="env:Shared", limits=LIMITS, capacity=2)
        lease.reset({"id": "t"}, seed=0)
        pid = lease.pid
        lease.close()
        again = registry.lease(key=KEY, files=FILES, entrypoint="env:Shared", limits=LIMITS, capacity=2)
        again.reset({"id": "t"}, seed=0)
        assert again.pid == pid
        again.close()
        time.sleep(1.0)
        assert process_gone(pid) and registry.groups() == []
    finally:
        registry.close_all()


def test_processes_are_per_team_and_version_and_a_crash_stays_in_its_own(registry):
    mine = registry.lease()
    theirs = registry.lease(key=SharedKey(team_id=2, content_hash=KEY.content_hash, label="counter@1"))
    newer = registry.lease(key=SharedKey(team_id=1, content_hash="beef", label="counter@2"))
    assert len({mine.group, theirs.group, newer.group}) == 3
    for lease in (mine, theirs, newer):
        lease.reset({"id": "t"}, seed=0)
    os.kill(theirs.pid, signal.SIGKILL)
    with pytest.raises(SandboxCrashed, match="died"):
        theirs.step(1)
    assert mine.step(1).observation == {"n": 1} and newer.step(2).observation == {"n": 2}
    with pytest.raises(TypeError, match="SharedKey"):
        SharedSandboxes().lease(key=("1", "c0ffee"), files=FILES, entrypoint="env:Shared", limits=LIMITS, capacity=2)


def test_a_version_that_does_not_load_raises_and_leaves_no_process(registry):
    with pytest.raises(UserCodeError, match="env.py has no Missing"):
        registry.lease(entrypoint="env:Missing")
    assert registry.groups() == []


def test_a_process_started_from_a_thread_outlives_that_thread(registry):
    # Sandboxes die with the thread that forked them (PR_SET_PDEATHSIG): a shared one must not.
    opened = []
    thread = threading.Thread(target=lambda: opened.append(registry.lease()))
    thread.start()
    thread.join()
    time.sleep(0.1)
    assert opened[0].reset({"id": "t", "goal": 1}, seed=0)["n"] == 0
    assert opened[0].step(1).terminated is True


def test_many_threads_step_their_own_episodes_through_one_process(registry):
    leases = [registry.lease(capacity=16) for _ in range(16)]
    assert len({lease.group for lease in leases}) == 1
    failures = []

    def play(lease, goal):
        try:
            lease.reset({"id": "t", "goal": goal}, seed=0)
            for n in range(1, goal + 1):
                assert lease.step(1).observation == {"n": n}
            assert lease.verify() == (1.0, f"n={goal}, goal={goal}")
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=play, args=(lease, 20 + index)) for index, lease in enumerate(leases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_shared_sandbox_can_be_used_without_the_registry():
    group = SharedSandbox(files=FILES, entrypoint="env:Shared", limits=LIMITS, capacity=1, label="counter@1").start()
    try:
        with group.lease() as lease:
            assert lease.reset({"id": "t", "goal": 1}, seed=0)["live"] == 2
            assert lease.step(1).terminated is True
        assert group.in_use == 0 and group.alive
    finally:
        group.close()
    assert not group.alive
