"""Fixtures for the sandbox tests: tiny environments as source text and a sandbox starter that
always closes what it opened and checks nothing of the sandbox uid is left behind. No database."""

import textwrap
import time

import pytest

from runs.sandbox import ProcessSandbox, SandboxLimits
from runs.sandbox.uids import uid_processes

COUNTER_ENV = textwrap.dedent(
    """
    from studio_sdk import Environment

    class Counter(Environment):
        def reset(self, task, seed):
            self.n = 0
            self.goal = task.get("goal", 3)
            return {"n": 0, "goal": self.goal}

        def step(self, action):
            self.n += int(action)
            return {"n": self.n}, 1.0, self.n >= self.goal, False, {"seen": action}

        def verify(self):
            return (1.0 if self.n == self.goal else 0.0), f"n={self.n}, goal={self.goal}"
    """
)


@pytest.fixture
def counter_env():
    """Source of a well-behaved env.py (entrypoint "env:Counter")."""
    return COUNTER_ENV


@pytest.fixture
def env_source():
    """env_source(methods) -> env.py source: `import os, sys, time` then class Env with those methods."""

    def build(body: str) -> str:
        return "import os, sys, time\n\n\nclass Env:\n" + textwrap.indent(textwrap.dedent(body), "    ")

    return build


@pytest.fixture
def start_sandbox():
    """start_sandbox(files, mode=..., entrypoint=..., **limits) -> a started ProcessSandbox."""
    opened: list[ProcessSandbox] = []

    def start(files, mode="env", entrypoint="env:Env", **limits):
        sandbox = ProcessSandbox()
        opened.append(sandbox)
        sandbox.start(files, mode=mode, entrypoint=entrypoint, limits=SandboxLimits(**limits))
        return sandbox

    yield start
    for sandbox in opened:
        uid, workdir = sandbox.uid, sandbox.workdir
        sandbox.close()
        assert workdir is None or not workdir.exists(), f"workdir {workdir} was not removed"
        if sandbox.uid_switched:
            assert_no_processes_of(uid)


def assert_no_processes_of(uid: int) -> None:
    """Nothing alive under the uid; zombies of escaped grandchildren are reaped by init (~2 s here)."""
    live, zombies = uid_processes(uid)
    assert not live, f"processes of sandbox uid {uid} left behind: {live}"
    deadline = time.monotonic() + 5
    while zombies and time.monotonic() < deadline:
        time.sleep(0.05)
        live, zombies = uid_processes(uid)
    assert not live and not zombies, f"sandbox uid {uid} still has {len(live)} live and {zombies} zombie processes"


@pytest.fixture
def assert_fresh_sandbox_works(start_sandbox):
    """After a fault: a new sandbox runs a whole episode normally."""

    def check():
        sandbox = start_sandbox({"env.py": COUNTER_ENV}, entrypoint="env:Counter", step_timeout_s=5)
        assert sandbox.reset({"id": "t1", "goal": 2}, seed=0) == {"n": 0, "goal": 2}
        assert sandbox.step(1).terminated is False
        assert sandbox.step(1).terminated is True
        assert sandbox.verify() == (1.0, "n=2, goal=2")

    return check
