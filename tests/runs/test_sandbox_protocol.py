"""The sandbox protocol: message encoding, the runner speaking it directly, agent mode and the pool."""

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from runs.sandbox import SandboxLimits, SandboxPool, UserCodeError
from runs.sandbox import protocol
from runs.sandbox.process import RUNNER_PATH, SANDBOX_PYTHON, default_python_path


def test_messages_round_trip_as_one_json_line():
    line = protocol.encode(protocol.request("step", action={"move": [1, 2]}))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.decode(line) == {"op": "step", "action": {"move": [1, 2]}}
    assert protocol.decode(protocol.encode(protocol.ok(3))) == {"ok": True, "result": 3}
    assert protocol.error("boom", protocol.KIND_CONTRACT) == {"ok": False, "error": "boom", "kind": "contract"}


@pytest.mark.parametrize("line", [b"not json\n", b"[1, 2]\n", b"\xff\xfe\n"])
def test_decode_refuses_anything_but_a_json_object(line):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(line)


def test_unknown_op_and_oversized_message_are_refused():
    with pytest.raises(protocol.ProtocolError, match="unknown op"):
        protocol.request("format_disk")
    with pytest.raises(protocol.ProtocolError, match="line limit"):
        protocol.encode({"op": "step", "action": "a" * protocol.MAX_LINE_BYTES})


def test_an_observation_over_the_limit_is_named_with_its_size_never_replaced():
    assert protocol.over_limit(protocol.encoded_size([1, 2, 3]), 1000) is None
    assert protocol.encoded_size("x" * 300_000) == 300_002
    assert protocol.over_limit(300_002, 256_000) == "observation is 0.3 MB, over the limit of 0.256 MB"


def test_protocol_module_is_standard_library_only():
    # The runner imports it under Debian's python with no site-packages at all.
    result = subprocess.run(
        [SANDBOX_PYTHON, "-S", "-I", "-c", "import sys; sys.path.insert(0, '.'); import protocol; print(sorted(set(sys.modules) & {'django', 'numpy'}))"],
        cwd=Path(protocol.__file__).parent,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def _talk(workdir, lines):
    """Run runner.py bare (no sandbox) in workdir, feed it lines, return its decoded answers."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(default_python_path())}
    result = subprocess.run(
        [SANDBOX_PYTHON, "-S", "-B", str(RUNNER_PATH)],
        input=b"".join(lines),
        cwd=workdir,
        env=env,
        capture_output=True,
        timeout=30,
    )
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr.decode()


def test_runner_answers_every_request_and_refuses_bad_ones(tmp_path):
    (tmp_path / "env.py").write_text(
        textwrap.dedent(
            """
            class Env:
                def reset(self, task, seed):
                    print("noise on stdout")
                    return {"seed": seed}

                def step(self, action):
                    return action, 1, 0, 0, None
            """
        )
    )
    answers, stderr = _talk(
        tmp_path,
        [
            b'{"op": "step", "action": 1}\n',
            b"garbage\n",
            b'{"op": "load", "mode": "env", "entrypoint": "env:Env"}\n',
            b'{"op": "reset", "task": {"id": "t"}, "seed": 4}\n',
            b'{"op": "act", "observation": 1}\n',
            b'{"op": "step", "action": [1]}\n',
            b'{"op": "close"}\n',
        ],
    )
    assert [answer["ok"] for answer in answers] == [False, False, True, True, False, True, True]
    assert answers[0] == {"ok": False, "error": "step before load", "kind": "protocol"}
    assert answers[1]["kind"] == "protocol" and "not a JSON line" in answers[1]["error"]
    assert answers[2]["result"]["python"].startswith("3.11")
    assert answers[3]["result"]["observation"] == {"seed": 4}
    assert answers[4]["error"] == "act is not allowed in env mode"
    assert answers[5]["result"] == {"observation": [1], "reward": 1.0, "terminated": False, "truncated": False, "info": {}}
    assert "noise on stdout" in stderr


def test_runner_reports_the_action_schema_and_state_and_a_failing_state_never_costs_the_step(tmp_path):
    (tmp_path / "env.py").write_text(
        textwrap.dedent(
            """
            class Env:
                action_schema = {"type": "object", "properties": {"column": {"type": "integer"}}}

                def reset(self, task, seed):
                    self.moves = []
                    return {}

                def step(self, action):
                    self.moves.append(action["column"])
                    return {}, 0, 0, 0, {}

                def state(self):
                    if len(self.moves) > 1:
                        raise RuntimeError("no state now")
                    return {"moves": self.moves}
            """
        )
    )
    answers, _ = _talk(tmp_path, [
        b'{"op": "load", "mode": "env", "entrypoint": "env:Env"}\n',
        b'{"op": "reset", "task": {"id": "t"}, "seed": 0}\n',
        b'{"op": "step", "action": {"column": 2}}\n',
        b'{"op": "step", "action": {"column": 1}}\n',
    ])
    reset, first, second = (answer["result"] for answer in answers[1:])
    assert reset["action_schema"]["properties"]["column"] == {"type": "integer"} and reset["state"] == {"moves": []}
    assert first["state"] == {"moves": [2]}
    assert "state" not in second and "RuntimeError: no state now" in second["state_error"] and second["reward"] == 0.0


def test_runner_keeps_one_instance_per_episode_until_it_ends(tmp_path):
    (tmp_path / "env.py").write_text(
        textwrap.dedent(
            """
            made = []

            class Env:
                def __init__(self):
                    made.append(self)
                    self.n = 0

                def reset(self, task, seed):
                    self.n = seed
                    return {"n": self.n, "instances": len(made)}

                def step(self, action):
                    if action == "boom":
                        raise ValueError("boom")
                    self.n += action
                    return self.n, 1, 0, 0, None

                def verify(self):
                    return self.n, f"n={self.n}"

                def close(self):
                    print("closed", self.n)
            """
        )
    )
    answers, stderr = _talk(
        tmp_path,
        [
            b'{"op": "load", "mode": "env", "entrypoint": "env:Env"}\n',
            b'{"op": "reset", "task": {}, "seed": 10, "episode": "a"}\n',
            b'{"op": "reset", "task": {}, "seed": 20, "episode": "b"}\n',
            b'{"op": "step", "action": 1, "episode": "a"}\n',
            b'{"op": "step", "action": "boom", "episode": "b"}\n',
            b'{"op": "step", "action": 2, "episode": "b"}\n',
            b'{"op": "verify", "episode": "a"}\n',
            b'{"op": "end", "episode": "a"}\n',
            b'{"op": "end", "episode": "a"}\n',
            b'{"op": "reset", "task": {}, "seed": 1}\n',
            b'{"op": "step", "action": 5}\n',
            b'{"op": "step", "action": 1, "episode": "a"}\n',
        ],
    )
    results = [answer.get("result") for answer in answers]
    assert results[0]["python"].startswith("3.11")
    # One instance at load, then one for each episode at its first reset.
    assert results[1]["observation"] == {"n": 10, "instances": 2}
    assert results[2]["observation"] == {"n": 20, "instances": 3}
    assert results[3]["observation"] == 11
    assert answers[4] == {"ok": False, "error": "ValueError: boom (env.py line 15)", "kind": "exception"}
    assert results[5]["observation"] == 22
    assert results[6] == {"reward": 11.0, "reason": "n=11"}
    assert answers[7] == answers[8] == {"ok": True, "result": None}
    assert "closed 11" in stderr and stderr.count("closed") == 1
    # Requests without an episode use the instance made at load, as before.
    assert results[9]["observation"] == {"n": 1, "instances": 3} and results[10]["observation"] == 6
    assert answers[11] == {"ok": False, "error": "step for episode 'a', which has not been reset", "kind": "protocol"}


AGENT = textwrap.dedent(
    """
    calls = []

    def reset(task, seed):
        calls.clear()
        calls.append(("reset", task["id"], seed))

    def act(observation, info):
        calls.append(observation)
        return {"move": observation["n"] + 1, "history": len(calls)}
    """
)


def test_agent_mode_resets_and_acts(start_sandbox):
    agent = start_sandbox({"agent.py": AGENT}, mode="agent", entrypoint="agent.py")
    assert agent.reset({"id": "t1"}, seed=3) is None
    assert agent.act({"n": 1}, {}) == {"move": 2, "history": 2}
    assert agent.act({"n": 5}) == {"move": 6, "history": 3}
    with pytest.raises(Exception, match="only for env sandboxes"):
        agent.step(1)


def test_agent_without_act_fails_to_load(start_sandbox):
    with pytest.raises(UserCodeError, match=r"agent.py has no act\(observation, info\) function"):
        start_sandbox({"agent.py": "def reset(task, seed): pass\n"}, mode="agent", entrypoint="agent")


def test_gymnasium_entrypoint_matches_gymnasium_itself(start_backend_sandbox):
    gymnasium = pytest.importorskip("gymnasium")
    sandbox = start_backend_sandbox({}, entrypoint="gymnasium:FrozenLake-v1")
    env = gymnasium.make("FrozenLake-v1")
    expected_observation, _info = env.reset(seed=5)
    assert sandbox.reset({"id": "t"}, seed=5) == int(expected_observation)
    assert sandbox.action_space == {"type": "discrete", "n": 4, "start": 0}
    for action in [1, 2, 2, 1, 0, 3]:
        observation, reward, terminated, truncated, _ = env.step(action)
        step = sandbox.step(action)
        assert (step.observation, step.reward, step.terminated, step.truncated) == (
            int(observation), float(reward), terminated, truncated,
        )
        if terminated or truncated:
            break


def test_pool_hands_out_prewarmed_sandboxes_with_the_rollout_limits(counter_env):
    with SandboxPool(size=2) as pool:
        sandboxes = [pool.start({"env.py": counter_env + LIMITS_PROBE}, entrypoint="env:Probe", limits=SandboxLimits(memory_mb=300)) for _ in range(3)]
        try:
            for sandbox in sandboxes:
                assert sandbox.facts["pooled"] is True
                assert sandbox.reset({"id": "t", "goal": 1}, seed=0)["address_space_mb"] == 300
                assert sandbox.step(1).terminated is True
            assert len({sandbox.uid for sandbox in sandboxes}) == 3
        finally:
            for sandbox in sandboxes:
                sandbox.close()


LIMITS_PROBE = textwrap.dedent(
    """

    class Probe(Counter):
        def reset(self, task, seed):
            import resource
            observation = super().reset(task, seed)
            observation["address_space_mb"] = resource.getrlimit(resource.RLIMIT_AS)[0] // (1024 * 1024)
            return observation
    """
)
