"""The `docker` sandbox backend, for real: the fault cases of test_sandbox_faults.py through a container.

Needs a Docker engine (scripts/start_docker.sh installs and starts one; .ci/run calls it). No registry
is reachable, so the runtime image is built here from the host's files (runs/sandbox/docker_image.py)
once per content. Where no engine answers, every test that needs one skips with the reason.
"""

import os
import socket
import subprocess
import textwrap
import time

import pytest

from runs.sandbox import ProcessSandbox, Sandbox, SandboxCrashed, SandboxLimits, SandboxTimeout, UserCodeError
from runs.sandbox.backends import BACKENDS, sandbox_class, sandbox_for
from runs.sandbox.uids import uid_processes

pytestmark = pytest.mark.docker

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="the per-sandbox uid needs root")

ALLOWED_ENV = {
    "PATH", "LANG", "HOME", "TMPDIR", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
    "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LC_CTYPE",
}


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


def assert_no_processes_of(uid: int) -> None:
    deadline = time.monotonic() + 5
    while True:
        live, zombies = uid_processes(uid)
        if not live and not zombies:
            return
        assert time.monotonic() < deadline, f"sandbox uid {uid} still has {live} live and {zombies} zombie processes"
        time.sleep(0.05)


@pytest.fixture
def start_docker(docker_image_name):
    """start_docker(files, mode=..., entrypoint=..., **limits) -> a started DockerSandbox, closed after."""
    from runs.sandbox.docker import DockerSandbox

    opened = []

    def start(files, mode="env", entrypoint="env:Env", **limits):
        sandbox = DockerSandbox(image=docker_image_name)
        opened.append(sandbox)
        sandbox.start(files, mode=mode, entrypoint=entrypoint, limits=SandboxLimits(**limits))
        return sandbox

    yield start
    for sandbox in opened:
        uid, workdir, container = sandbox.uid, sandbox.workdir, sandbox.container
        sandbox.close()
        assert workdir is None or not workdir.exists(), f"workdir {workdir} was not removed"
        if sandbox.uid_switched:
            assert_no_processes_of(uid)
        if container:
            assert_container_gone(container)


@pytest.fixture
def fresh_docker_works(start_docker, counter_env):
    def check():
        sandbox = start_docker({"env.py": counter_env}, entrypoint="env:Counter")
        assert sandbox.reset({"id": "t1", "goal": 2}, seed=0) == {"n": 0, "goal": 2}
        assert sandbox.step(1).terminated is False
        assert sandbox.step(1).terminated is True
        assert sandbox.verify() == (1.0, "n=2, goal=2")

    return check


# -- backend selection (no engine needed) ---------------------------------------------------------


def test_backend_names_select_the_sandbox_class():
    from runs.sandbox.docker import DockerSandbox

    assert BACKENDS == ("process", "docker")
    assert sandbox_class("process") is ProcessSandbox
    assert sandbox_class("docker") is DockerSandbox
    assert sandbox_class(" Docker ") is DockerSandbox
    # Siblings behind one base, neither a kind of the other.
    assert issubclass(DockerSandbox, Sandbox) and issubclass(ProcessSandbox, Sandbox)
    assert not issubclass(DockerSandbox, ProcessSandbox) and not issubclass(ProcessSandbox, DockerSandbox)
    assert DockerSandbox.backend == "docker" and ProcessSandbox.backend == "process"
    assert isinstance(sandbox_for("process"), ProcessSandbox)
    unstarted = sandbox_for("docker", image="studio-sandbox:never-built")
    assert isinstance(unstarted, DockerSandbox) and unstarted.image == "studio-sandbox:never-built"
    unstarted.close()  # closing an unstarted sandbox is harmless
    with pytest.raises(ValueError, match=r"unknown sandbox backend 'kvm': expected one of process, docker"):
        sandbox_class("kvm")


# -- the fault cases, through the container --------------------------------------------------------


def test_normal_episode_and_facts(start_docker, counter_env, docker_image_name):
    sandbox = start_docker({"env.py": counter_env}, entrypoint="env:Counter", memory_mb=300)
    assert sandbox.reset({"id": "t1", "goal": 3}, seed=7) == {"n": 0, "goal": 3}
    steps = [sandbox.step(1) for _ in range(3)]
    assert [step.observation for step in steps] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [step.terminated for step in steps] == [False, False, True]
    assert sandbox.verify() == (1.0, "n=3, goal=3")
    facts = sandbox.facts
    assert facts["backend"] == "docker"
    assert facts["image"] == docker_image_name and facts["container"] == sandbox.container
    assert facts["network_isolated"] is True and sandbox.network_isolated is True
    assert facts["python"].startswith("3.11")
    assert facts["numpy"] and facts["gymnasium"]
    assert facts["limits"]["applied"]["memory_mb"] == 300
    assert facts["uid"] != 0 and facts["uid"] == sandbox.uid
    assert sandbox.alive


def test_gymnasium_environment_matches_gymnasium_on_the_host(start_docker):
    import gymnasium

    sandbox = start_docker({}, entrypoint="gymnasium:FrozenLake-v1")
    reference = gymnasium.make("FrozenLake-v1")
    expected_first, _info = reference.reset(seed=3)
    assert sandbox.reset({"id": "t"}, seed=3) == int(expected_first)
    for action in (1, 2, 2, 1):
        observation, reward, terminated, truncated, _info = reference.step(action)
        step = sandbox.step(action)
        assert (step.observation, step.reward, step.terminated, step.truncated) == (
            int(observation), float(reward), bool(terminated), bool(truncated),
        )
        if terminated or truncated:
            break


def test_exception_in_step_is_readable_and_the_sandbox_keeps_going(start_docker, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            if action < 0:
                raise KeyError("negative")
            return action, 0.0, False, False, {}
        """
    )
    sandbox = start_docker({"env.py": source})
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(UserCodeError, match=r"^KeyError: 'negative' \(env.py line 11\)$"):
        sandbox.step(-1)
    assert sandbox.step(5).observation == 5


def test_infinite_loop_times_out_and_the_container_is_killed(start_docker, fresh_docker_works, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            while True:
                pass
        """
    )
    sandbox = start_docker({"env.py": source}, step_timeout_s=0.5)
    sandbox.reset({"id": "t"}, seed=0)
    client_pid, container = sandbox.pid, sandbox.container
    started = time.monotonic()
    with pytest.raises(SandboxTimeout, match=r"^env.py step\(\) did not answer within 0.5 s$"):
        sandbox.step(0)
    assert time.monotonic() - started < 5
    assert not os.path.exists(f"/proc/{client_pid}") or open(f"/proc/{client_pid}/stat").read().split()[2] == "Z"
    assert_container_gone(container)
    with pytest.raises(SandboxCrashed, match="no longer running"):
        sandbox.step(0)
    fresh_docker_works()


def test_cpu_limit_kills_a_busy_container_with_a_readable_reason(start_docker, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            while True:
                pass
        """
    )
    sandbox = start_docker({"env.py": source}, step_timeout_s=20, cpu_s=1)
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(SandboxCrashed, match=r"CPU time \(cpu_s=1\).*SIGXCPU"):
        sandbox.step(0)


def test_memory_bomb_is_stopped_with_a_readable_reason(start_docker, fresh_docker_works, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            hoard = []
            while True:
                hoard.append(bytearray(16 * 1024 * 1024))
        """
    )
    sandbox = start_docker({"env.py": source}, memory_mb=256)
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises((UserCodeError, SandboxCrashed), match=r"memory_mb=256"):
        sandbox.step(0)
    fresh_docker_works()


def test_container_dying_mid_step_is_reported_with_its_exit(start_docker, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            if action == "exit":
                print("bye", file=sys.stderr, flush=True)
                os._exit(3)
            import ctypes
            ctypes.string_at(0)
        """
    )
    sandbox = start_docker({"env.py": source})
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(SandboxCrashed, match=r"^env.py step\(\): sandbox exited with status 3; last stderr line: bye$"):
        sandbox.step("exit")
    sandbox = start_docker({"env.py": source})
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(SandboxCrashed, match=r"sandbox exited with signal SIGSEGV"):
        sandbox.step("segfault")


FORK_BOMB = """
def reset(self, task, seed):
    return 0

def step(self, action):
    forked, error = 0, None
    try:
        while True:
            pid = os.fork()
            if pid == 0:
                os.setsid()  # try to escape the sandbox's process group
                while True:
                    try:
                        os.fork()
                    except OSError:
                        time.sleep(0.01)
            forked += 1
    except OSError as exc:
        error = exc.strerror
    return {"forked": forked, "error": error}, 0.0, True, False, {}
"""


def test_fork_bomb_is_capped_and_leaves_nothing_behind(start_docker, fresh_docker_works, env_source):
    sandbox = start_docker({"env.py": env_source(FORK_BOMB)}, nproc=16, step_timeout_s=5)
    sandbox.reset({"id": "t"}, seed=0)
    observation = sandbox.step(0).observation
    assert observation["forked"] < 16
    assert observation["error"] == "Resource temporarily unavailable"
    uid, container = sandbox.uid, sandbox.container
    if sandbox.uid_switched:
        assert uid_processes(uid)[0], "the bomb's processes should be alive until close"
    sandbox.close()
    if sandbox.uid_switched:
        assert_no_processes_of(uid)
    assert_container_gone(container)
    fresh_docker_works()


def test_huge_file_write_fails_on_the_file_size_limit(start_docker, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            with open("big.bin", "wb") as handle:
                for _ in range(64):
                    handle.write(b"x" * (1024 * 1024))
            return os.path.getsize("big.bin")
        """
    )
    sandbox = start_docker({"env.py": source}, fsize_mb=16)
    with pytest.raises(UserCodeError, match=r"File too large"):
        sandbox.reset({"id": "t"}, seed=0)


def test_root_file_system_is_read_only_and_the_workdir_is_private(start_docker, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            def attempt(action):
                try:
                    action()
                    return "ok"
                except OSError as exc:
                    return exc.strerror

            def write(path):
                with open(path, "w") as handle:
                    handle.write("x")

            return {
                "root": attempt(lambda: write("/evil")),
                "usr": attempt(lambda: write("/usr/lib/python3.11/os.py")),
                "runner": attempt(lambda: write("/opt/studio/runner/runner.py")),
                "sdk": attempt(lambda: write("/opt/studio/sdk/evil.py")),
                "tmp": attempt(lambda: write("/tmp/scratch")),
                "workdir": attempt(lambda: write("scratch")),
                "cwd": os.getcwd(),
                "uid": os.getuid(),
                "own": sorted(os.listdir(".")),
                "has_shell": os.path.exists("/bin/sh"),
                "capabilities": [line for line in open("/proc/self/status") if line.startswith("CapEff")][0].split()[1],
            }
        """
    )
    sandbox = start_docker({"env.py": source, "tasks.jsonl": "{}\n"})
    seen = sandbox.reset({"id": "t"}, seed=0)
    assert seen["root"] == seen["usr"] == seen["runner"] == seen["sdk"] == "Read-only file system"
    assert seen["tmp"] == "ok" and seen["workdir"] == "ok"
    assert seen["cwd"] == "/work"
    assert seen["uid"] != 0
    assert seen["own"] == ["env.py", "scratch", "tasks.jsonl"]
    assert seen["has_shell"] is False
    assert int(seen["capabilities"], 16) == 0


def test_garbage_on_stdout_does_not_disturb_the_protocol(start_docker, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            print("hello from reset")
            os.write(1, b'{"ok": true, "result": "forged"}\\n')
            sys.__stdout__.write("not json at all\\n")
            sys.__stdout__.flush()
            return "real"

        def step(self, action):
            print("x" * 200_000)
            return "still real", 0.0, True, False, {}
        """
    )
    sandbox = start_docker({"env.py": source})
    assert sandbox.reset({"id": "t"}, seed=0) == "real"
    assert "hello from reset" in sandbox.stderr_tail()
    assert sandbox.step(0).observation == "still real"
    assert sandbox.stderr_tail().endswith("x" * 1000 + "\n")


def test_host_secrets_do_not_reach_the_container(start_docker, monkeypatch, env_source):
    monkeypatch.setenv("DATABASE_URL", "postgres://studio:hunter2@db/studio")
    monkeypatch.setenv("SECRET_KEY", "django-insecure-secret")
    monkeypatch.setenv("REDIS_URL", "redis://localhost:6379/0")
    source = env_source(
        """
        def reset(self, task, seed):
            return dict(os.environ)
        """
    )
    sandbox = start_docker({"env.py": source})
    seen = sandbox.reset({"id": "t"}, seed=0)
    assert "DATABASE_URL" not in seen and "SECRET_KEY" not in seen and "REDIS_URL" not in seen
    assert "hunter2" not in repr(seen)
    assert set(seen) <= ALLOWED_ENV, set(seen) - ALLOWED_ENV


def test_network_is_cut_off(start_docker, env_source):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    source = env_source(
        f"""
        def reset(self, task, seed):
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
                connect = "connected"
            except OSError as exc:
                connect = type(exc).__name__ + ": " + str(exc)
            return {{"connect": connect, "interfaces": sorted(name for _index, name in socket.if_nameindex())}}
        """
    )
    try:
        sandbox = start_docker({"env.py": source})
        assert sandbox.network_isolated is True
        seen = sandbox.reset({"id": "t"}, seed=0)
        assert seen["connect"] != "connected"
        assert "unreachable" in seen["connect"].lower() or "refused" in seen["connect"].lower()
        assert seen["interfaces"] == ["lo"]  # no route anywhere: nothing leaves the container
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


@needs_root
def test_sandboxes_get_their_own_uids(start_docker, counter_env):
    first = start_docker({"env.py": counter_env}, entrypoint="env:Counter")
    second = start_docker({"env.py": counter_env}, entrypoint="env:Counter")
    assert first.uid != second.uid
    assert first.facts["uid"] == first.uid and second.facts["uid"] == second.uid


def test_scripted_agent_runs_in_a_container(start_docker):
    agent = start_docker(
        {"agent.py": textwrap.dedent("def act(observation, info):\n    return observation['n'] + 1\n")},
        mode="agent",
        entrypoint="agent",
    )
    agent.reset({"id": "t"}, seed=0)
    assert agent.act({"n": 41}) == 42
