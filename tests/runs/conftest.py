"""Fixtures for the sandbox tests: tiny environments as source text, sandbox starters that always
close what they opened and check nothing of the sandbox uid (or its container) is left behind, and
`backend`, which runs a test once per sandbox backend (docker skips with the reason where no engine
answers). No database."""

import subprocess
import textwrap
import time

import pytest

from runs.sandbox import ProcessSandbox, SandboxLimits
from runs.sandbox.backends import sandbox_for
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


@pytest.fixture(scope="session")
def docker_image_name():
    """The engine is up and the runtime image exists and starts; otherwise skip with the reason."""
    from runs.sandbox import docker_image
    from runs.sandbox.docker import DOCKER, sandbox_image

    ok, why = docker_image.docker_engine_status(DOCKER)
    if not ok:
        pytest.skip(f"no Docker engine: {why}")
    try:
        image = sandbox_image(DOCKER)
    except docker_image.ImageBuildError as exc:
        pytest.skip(f"no Docker engine: the sandbox image could not be built: {exc}")
    smoke = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", "--log-driver", "none", image, docker_image.PYTHON_IN_IMAGE, "-S", "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if smoke.returncode != 0:
        pytest.skip(f"no Docker engine: the engine cannot run containers: {smoke.stderr.strip()[-300:]}")
    return image


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request):
    """Each sandbox backend by name; docker skips with the reason where no engine answers."""
    if request.param == "docker":
        request.getfixturevalue("docker_image_name")
    return request.param


def _containers(name: str) -> list[str]:
    result = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name=^{name}$"], capture_output=True, text=True, timeout=30
    )
    return result.stdout.split()


def assert_container_gone(name: str) -> None:
    """--rm removes the container once it exits; the engine does that a moment later."""
    deadline = time.monotonic() + 10
    while _containers(name):
        assert time.monotonic() < deadline, f"container {name} was left behind"
        time.sleep(0.1)


def sandbox_starter(make):
    """(start, close_all): start(files, mode=..., entrypoint=..., **limits) -> a started sandbox of make()."""
    opened = []

    def start(files, mode="env", entrypoint="env:Env", **limits):
        sandbox = make()
        opened.append(sandbox)
        sandbox.start(files, mode=mode, entrypoint=entrypoint, limits=SandboxLimits(**limits))
        return sandbox

    def close_all():
        for sandbox in opened:
            uid, workdir, container = sandbox.uid, sandbox.workdir, sandbox.facts.get("container")
            sandbox.close()
            assert workdir is None or not workdir.exists(), f"workdir {workdir} was not removed"
            if sandbox.uid_switched:
                assert_no_processes_of(uid)
            if container:
                assert_container_gone(container)

    return start, close_all


@pytest.fixture
def start_sandbox():
    """start_sandbox(files, mode=..., entrypoint=..., **limits) -> a started ProcessSandbox."""
    start, close_all = sandbox_starter(ProcessSandbox)
    yield start
    close_all()


@pytest.fixture
def start_backend_sandbox(backend):
    """Like start_sandbox, on each backend in turn (a test using it runs once per backend)."""
    start, close_all = sandbox_starter(lambda: sandbox_for(backend))
    yield start
    close_all()


def assert_no_processes_of(uid: int) -> None:
    """Nothing alive under the uid; zombies of escaped grandchildren are reaped by init (~2 s here)."""
    live, zombies = uid_processes(uid)
    assert not live, f"processes of sandbox uid {uid} left behind: {live}"
    deadline = time.monotonic() + 5
    while zombies and time.monotonic() < deadline:
        time.sleep(0.05)
        live, zombies = uid_processes(uid)
    assert not live and not zombies, f"sandbox uid {uid} still has {len(live)} live and {zombies} zombie processes"


def _fresh_sandbox_check(start):
    def check():
        sandbox = start({"env.py": COUNTER_ENV}, entrypoint="env:Counter", step_timeout_s=5)
        assert sandbox.reset({"id": "t1", "goal": 2}, seed=0) == {"n": 0, "goal": 2}
        assert sandbox.step(1).terminated is False
        assert sandbox.step(1).terminated is True
        assert sandbox.verify() == (1.0, "n=2, goal=2")

    return check


@pytest.fixture
def assert_fresh_sandbox_works(start_sandbox):
    """After a fault: a new (process) sandbox runs a whole episode normally."""
    return _fresh_sandbox_check(start_sandbox)


@pytest.fixture
def assert_fresh_backend_works(start_backend_sandbox):
    """After a fault: a new sandbox of the same backend runs a whole episode normally."""
    return _fresh_sandbox_check(start_backend_sandbox)
