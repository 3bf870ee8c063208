"""What untrusted environment and agent code can do to a sandbox, and what it cannot do to the host.

Each fault case runs on every backend (`backend`, `start_backend_sandbox`: process, and docker where
an engine answers); the ones that only concern the process backend use `start_sandbox`."""

import os
import socket
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from runs.sandbox import SandboxCrashed, SandboxTimeout, UserCodeError
from runs.sandbox.uids import uid_processes
from tests.runs.conftest import assert_container_gone

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="uid switch and network namespace need root")
ALLOWED_ENV = {
    "PATH", "LANG", "HOME", "TMPDIR", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
    "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LC_CTYPE", "TZ",
}


def skip_process_unless_root(backend: str) -> None:
    """The process backend needs root for the uid switch and its own network namespace; docker does not."""
    if backend == "process" and not IS_ROOT:
        pytest.skip("uid switch and network namespace need root")


def test_normal_episode_runs_to_termination_and_verifies(start_backend_sandbox, counter_env):
    sandbox = start_backend_sandbox({"env.py": counter_env}, entrypoint="env:Counter")
    assert sandbox.reset({"id": "t1", "goal": 3}, seed=7) == {"n": 0, "goal": 3}
    steps = [sandbox.step(1) for _ in range(3)]
    assert [step.observation for step in steps] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [step.terminated for step in steps] == [False, False, True]
    assert steps[0].info == {"seen": 1}
    observation, reward, terminated, truncated, info = steps[-1]
    assert reward == 1.0 and truncated is False
    assert sandbox.verify() == (1.0, "n=3, goal=3")


def test_facts_record_versions_limits_and_isolation(start_backend_sandbox, backend, counter_env, request):
    sandbox = start_backend_sandbox({"env.py": counter_env}, entrypoint="env:Counter", memory_mb=300)
    facts = sandbox.facts
    assert facts["backend"] == backend
    assert facts["python"].startswith("3.11")
    assert facts["numpy"] and facts["gymnasium"]
    assert facts["limits"]["memory_mb"] == 300
    assert facts["limits"]["applied"]["memory_mb"] == 300
    assert facts["network_isolated"] is sandbox.network_isolated
    if backend == "docker":
        assert facts["image"] == request.getfixturevalue("docker_image_name") and facts["container"] == sandbox.container
    if IS_ROOT or backend == "docker":  # a container runs as nobody and without a network when not root
        assert facts["uid"] != 0 and facts["uid"] == sandbox.uid
        assert sandbox.network_isolated is True
    assert sandbox.alive


def test_exception_in_reset_is_readable_with_file_and_line(start_sandbox, assert_fresh_sandbox_works, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            raise ValueError(f"no such level {task['id']!r}")
        """
    )
    sandbox = start_sandbox({"env.py": source})
    with pytest.raises(UserCodeError) as caught:
        sandbox.reset({"id": "nope"}, seed=0)
    assert str(caught.value) == "ValueError: no such level 'nope' (env.py line 7)"
    assert caught.value.op == "reset"
    assert_fresh_sandbox_works()


def test_exception_in_step_is_readable_and_the_sandbox_keeps_going(start_backend_sandbox, env_source):
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
    sandbox = start_backend_sandbox({"env.py": source})
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(UserCodeError, match=r"^KeyError: 'negative' \(env.py line 11\)$"):
        sandbox.step(-1)
    assert sandbox.step(5).observation == 5


def test_step_that_breaks_the_contract_says_what_it_returned(start_sandbox, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return object()

        def step(self, action):
            return 1, 2
        """
    )
    sandbox = start_sandbox({"env.py": source})
    with pytest.raises(UserCodeError, match="reset\\(\\) observation is not JSON") as caught:
        sandbox.reset({"id": "t"}, seed=0)
    assert caught.value.kind == "contract"
    with pytest.raises(UserCodeError, match=r"step\(\) must return .* got 2 values"):
        sandbox.step(0)


def test_missing_class_fails_to_load_with_a_clear_message(start_sandbox):
    with pytest.raises(UserCodeError, match="env.py has no Nope"):
        start_sandbox({"env.py": "x = 1\n"}, entrypoint="env:Nope")


def test_syntax_error_in_env_names_the_line(start_sandbox):
    with pytest.raises(UserCodeError, match=r"SyntaxError: .*line 2"):
        start_sandbox({"env.py": "class Env:\n    def reset(self\n"})


def test_infinite_loop_in_step_times_out_and_the_process_is_killed(start_backend_sandbox, assert_fresh_backend_works, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            while True:
                pass
        """
    )
    sandbox = start_backend_sandbox({"env.py": source}, step_timeout_s=0.5)
    sandbox.reset({"id": "t"}, seed=0)
    pid, container = sandbox.pid, sandbox.facts.get("container")  # docker: the pid of the `docker run` client
    started = time.monotonic()
    with pytest.raises(SandboxTimeout, match=r"^env.py step\(\) did not answer within 0.5 s$"):
        sandbox.step(0)
    assert time.monotonic() - started < 5
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    if container:
        assert_container_gone(container)
    with pytest.raises(SandboxCrashed, match="no longer running"):
        sandbox.step(0)
    assert_fresh_backend_works()


def test_episode_timeout_bounds_the_whole_episode(start_sandbox, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            time.sleep(0.2)
            return 0, 0.0, False, False, {}
        """
    )
    sandbox = start_sandbox({"env.py": source}, step_timeout_s=5, episode_timeout_s=0.5)
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(SandboxTimeout, match=r"episode did not finish within episode_timeout_s=0.5 s"):
        for _ in range(10):
            sandbox.step(0)


def test_cpu_limit_kills_a_busy_sandbox_with_a_readable_reason(start_backend_sandbox, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            return 0

        def step(self, action):
            while True:
                pass
        """
    )
    sandbox = start_backend_sandbox({"env.py": source}, step_timeout_s=20, cpu_s=1)
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(SandboxCrashed, match=r"CPU time \(cpu_s=1\).*SIGXCPU"):
        sandbox.step(0)


def test_memory_bomb_is_stopped_with_a_readable_reason(start_backend_sandbox, assert_fresh_backend_works, env_source):
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
    sandbox = start_backend_sandbox({"env.py": source}, memory_mb=256)
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises((UserCodeError, SandboxCrashed), match=r"memory_mb=256"):
        sandbox.step(0)
    assert_fresh_backend_works()


def test_sandbox_dying_mid_step_is_reported_with_its_exit(start_backend_sandbox, env_source):
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
    sandbox = start_backend_sandbox({"env.py": source})
    sandbox.reset({"id": "t"}, seed=0)
    with pytest.raises(SandboxCrashed, match=r"^env.py step\(\): sandbox exited with status 3; last stderr line: bye$"):
        sandbox.step("exit")
    sandbox = start_backend_sandbox({"env.py": source})
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


def test_fork_bomb_is_capped_and_leaves_no_process_behind(start_backend_sandbox, backend, assert_fresh_backend_works, env_source):
    skip_process_unless_root(backend)
    sandbox = start_backend_sandbox({"env.py": env_source(FORK_BOMB)}, nproc=16, step_timeout_s=5)
    sandbox.reset({"id": "t"}, seed=0)
    observation = sandbox.step(0).observation
    assert observation["forked"] < 16
    assert observation["error"] == "Resource temporarily unavailable"
    uid, container = sandbox.uid, sandbox.facts.get("container")
    if sandbox.uid_switched:  # a container without root runs as nobody: no uid of its own to count
        assert uid_processes(uid)[0], "the bomb's processes should be alive until close"
    sandbox.close()
    if sandbox.uid_switched:
        if backend == "process":
            assert uid_processes(uid)[0] == []
        else:
            assert_no_processes_within(uid, seconds=5)
    if container:
        assert_container_gone(container)
    assert_fresh_backend_works()


def assert_no_processes_within(uid: int, *, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        live, zombies = uid_processes(uid)
        if not live and not zombies:
            return
        assert time.monotonic() < deadline, f"sandbox uid {uid} still has {live} live and {zombies} zombie processes"
        time.sleep(0.05)


def test_huge_file_write_fails_on_the_file_size_limit(start_backend_sandbox, assert_fresh_backend_works, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            with open("big.bin", "wb") as handle:
                for _ in range(64):
                    handle.write(b"x" * (1024 * 1024))
            return os.path.getsize("big.bin")
        """
    )
    sandbox = start_backend_sandbox({"env.py": source}, fsize_mb=16)
    with pytest.raises(UserCodeError, match=r"File too large"):
        sandbox.reset({"id": "t"}, seed=0)
    assert_fresh_backend_works()


def test_garbage_on_stdout_does_not_disturb_the_protocol(start_backend_sandbox, env_source):
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
    sandbox = start_backend_sandbox({"env.py": source})
    assert sandbox.reset({"id": "t"}, seed=0) == "real"
    assert "hello from reset" in sandbox.stderr_tail()
    assert sandbox.step(0).observation == "still real"
    assert sandbox.stderr_tail().endswith("x" * 1000 + "\n")


def test_host_secrets_do_not_reach_the_sandbox_environment(start_backend_sandbox, monkeypatch, env_source):
    monkeypatch.setenv("DATABASE_URL", "postgres://studio:hunter2@db/studio")
    monkeypatch.setenv("SECRET_KEY", "django-insecure-secret")
    monkeypatch.setenv("REDIS_URL", "redis://localhost:6379/0")
    source = env_source(
        """
        def reset(self, task, seed):
            return dict(os.environ)
        """
    )
    sandbox = start_backend_sandbox({"env.py": source})
    seen = sandbox.reset({"id": "t"}, seed=0)
    assert "DATABASE_URL" not in seen and "SECRET_KEY" not in seen and "REDIS_URL" not in seen
    assert "hunter2" not in repr(seen)
    assert set(seen) <= ALLOWED_ENV, set(seen) - ALLOWED_ENV


def test_network_connection_to_the_host_is_refused(start_backend_sandbox, backend, env_source):
    skip_process_unless_root(backend)
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
        sandbox = start_backend_sandbox({"env.py": source})
        assert sandbox.network_isolated is True
        seen = sandbox.reset({"id": "t"}, seed=0)
        assert seen["connect"] != "connected"
        assert "unreachable" in seen["connect"].lower() or "refused" in seen["connect"].lower()
        assert seen["interfaces"] == ["lo"]  # no route anywhere: nothing leaves the sandbox
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


@needs_root
def test_sandboxes_get_their_own_uids(start_backend_sandbox, counter_env):
    first = start_backend_sandbox({"env.py": counter_env}, entrypoint="env:Counter")
    second = start_backend_sandbox({"env.py": counter_env}, entrypoint="env:Counter")
    assert first.uid != second.uid
    assert first.facts["uid"] == first.uid and second.facts["uid"] == second.uid


def test_scripted_agent_acts_in_its_own_sandbox(start_backend_sandbox):
    agent = start_backend_sandbox(
        {"agent.py": textwrap.dedent("def act(observation, info):\n    return observation['n'] + 1\n")},
        mode="agent",
        entrypoint="agent",
    )
    agent.reset({"id": "t"}, seed=0)
    assert agent.act({"n": 41}) == 42


@needs_root
def test_agent_cannot_read_the_environment_files(start_sandbox, counter_env):
    env = start_sandbox({"env.py": counter_env + "\nSECRET_ANSWER = 42\n", "tasks.jsonl": "{}\n"}, entrypoint="env:Counter")
    agent_code = textwrap.dedent(
        """
        import os

        def _attempt(action):
            try:
                return repr(action())
            except OSError as exc:
                return type(exc).__name__

        def act(observation, info):
            workdir, pid = observation["workdir"], observation["pid"]
            return {
                "read_env": _attempt(lambda: open(os.path.join(workdir, "env.py")).read()),
                "list_env": _attempt(lambda: os.listdir(workdir)),
                "list_root": _attempt(lambda: os.listdir(os.path.dirname(workdir))),
                "env_cwd": _attempt(lambda: os.listdir(f"/proc/{pid}/cwd")),
                "env_environ": _attempt(lambda: open(f"/proc/{pid}/environ").read()),
                "tmp": _attempt(lambda: [name for name in os.listdir("/tmp") if name.startswith("sb-")]),
                "own": sorted(os.listdir(".")),
            }
        """
    )
    agent = start_sandbox({"agent.py": agent_code}, mode="agent", entrypoint="agent")
    assert agent.uid != env.uid
    agent.reset({"id": "t"}, seed=0)
    seen = agent.act({"workdir": str(env.workdir), "pid": env.pid})
    # Refused: outside the agent's view the env's workspace and process do not even exist.
    for attempt in ("read_env", "list_env", "list_root", "env_cwd", "env_environ"):
        assert seen[attempt] in ("PermissionError", "FileNotFoundError"), (attempt, seen[attempt])
    assert seen["tmp"] == "[]"
    assert seen["own"] == ["agent.py"]
    assert "SECRET_ANSWER" not in repr(seen)


def test_an_observation_over_the_versions_limit_is_refused_by_name_and_the_sandbox_goes_on(start_sandbox, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            self.n = 0
            return "y" * task.get("size", 10)

        def step(self, action):
            self.n += 1
            info = {"blob": "z" * 300_000} if action == 2 else {}
            return "x" * (300_000 if action == 1 else 10), 1.0, False, False, info
        """
    )
    sandbox = start_sandbox({"env.py": source}, observation_mb=0.2)
    with pytest.raises(UserCodeError, match=r"reset\(\) observation is 0.3 MB, over the limit of 0.2 MB") as caught:
        sandbox.reset({"id": "t", "size": 300_000}, seed=0)
    assert caught.value.kind == "limit"
    assert sandbox.reset({"id": "t"}, seed=0) == "y" * 10
    step = sandbox.step(1)  # the step is real; its observation is not sent, and says why
    assert step.observation is None and step.reward == 1.0
    assert sandbox.observation_error == "step() observation is 0.3 MB, over the limit of 0.2 MB ([limits] observation_mb = 0.2)"
    with pytest.raises(UserCodeError, match=r"step\(\) info is 0.3 MB, over the limit of 0.262144 MB"):
        sandbox.step(2)
    assert sandbox.step(0).observation == "x" * 10 and sandbox.observation_error is None


def test_arrays_and_odd_floats_cross_to_an_agent_and_back_exactly(start_sandbox, env_source):
    source = env_source(
        """
        def reset(self, task, seed):
            import numpy as np
            return {"b": np.arange(12, dtype=np.float64).reshape(3, 4) * -0.0, "a": float("nan"), "frame": np.full((210, 160, 3), 7, np.uint8)}

        def step(self, action):
            return action, 0.0, True, False, {}
        """
    )
    env = start_sandbox({"env.py": source})
    observation = env.reset({"id": "t"}, seed=0)
    assert list(observation) == ["b", "a", "frame"] and observation["a"] == {"__float__": "nan"}
    assert observation["frame"].shape == (210, 160, 3) and observation["frame"].dtype == np.uint8
    assert np.signbit(observation["b"]).sum() == 12  # every -0.0 kept
    agent_code = textwrap.dedent(
        """
        import math

        def act(observation, info):
            b, frame = observation["b"], observation["frame"]
            return [list(observation), str(b.dtype), list(b.shape), math.isnan(observation["a"]), int(frame.sum()), frame.flags.writeable]
        """
    )
    agent = start_sandbox({"agent.py": agent_code}, mode="agent", entrypoint="agent")
    agent.reset({"id": "t"}, 0)
    assert agent.act(observation, {}) == [["b", "a", "frame"], "float64", [3, 4], True, 7 * 210 * 160 * 3, True]


@needs_root
def test_a_killed_workers_workspace_and_cgroup_are_removed_when_its_uid_is_taken_again(counter_env, tmp_path):
    import json
    import subprocess
    import sys
    import time

    from runs.sandbox import SandboxConfig
    from runs.sandbox.uids import acquire_uid_slot, sweep_stale_sandboxes

    script = textwrap.dedent(
        f"""
        import json, os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from runs.sandbox import ProcessSandbox
        sandbox = ProcessSandbox()
        sandbox.start({{"env.py": {counter_env!r}}}, entrypoint="env:Counter")
        print(json.dumps({{"uid": sandbox.uid, "workspace": str(sandbox.workspace.path),
                           "cgroups": [str(path) for path in sandbox.cgroup.dirs.values()]}}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies without closing anything
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    left = json.loads(result.stdout)
    assert os.path.ismount(left["workspace"]) and all(os.path.isdir(path) for path in left["cgroups"])
    deadline = time.monotonic() + 10
    # What a new worker does at start; the dead sandbox's zombies are reaped by init first (~2 s here).
    while sweep_stale_sandboxes(SandboxConfig(uid_base=left["uid"], uid_count=1)) == 0:
        assert time.monotonic() < deadline, "the uid slot never came free"
        time.sleep(0.2)
    assert not os.path.exists(left["workspace"])
    assert not any(os.path.exists(path) for path in left["cgroups"])
    slot = acquire_uid_slot(SandboxConfig(uid_base=left["uid"], uid_count=1))
    slot.release()
