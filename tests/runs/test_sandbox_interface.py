"""The Sandbox protocol holds: every backend is a sibling implementing the base's abstract steps, every
sandbox the episode service may drive (a backend's, a shared sandbox's lease) has the attributes it
reads, the service reads them plainly (no getattr probes), and a new backend of a few lines, a plain
local process, plays a whole rollout through the episode service."""

import ast
import os
import signal
import subprocess
from pathlib import Path

import pytest

from runs import services
from runs.episodes import episode_finish, episode_setup, episode_start, episode_step
from runs.episodes.worker import rollout_claim
from runs.models import Rollout
from runs.sandbox import EPISODE_SURFACE, EpisodeLease, ProcessSandbox, Sandbox, SandboxConfig
from runs.sandbox.backends import BACKENDS, sandbox_class
from runs.sandbox.base import IsolationLayers
from runs.sandbox.config import RUNNER_PATH, default_python_path
from runs.sandbox.docker import DockerSandbox
from tests.runs.rollout_factories import package_version, random_agent

REPO = Path(__file__).resolve().parents[2]


def test_every_backend_is_a_sibling_implementing_the_abstract_steps():
    assert Sandbox.__abstractmethods__ == {"_launch", "_spawn_facts", "_kill", "interrupt"}
    with pytest.raises(TypeError, match="abstract"):
        Sandbox()
    classes = [sandbox_class(name) for name in BACKENDS]
    assert classes == [ProcessSandbox, DockerSandbox]
    for cls, name in zip(classes, BACKENDS):
        assert issubclass(cls, Sandbox) and not cls.__abstractmethods__, cls
        assert cls.backend == name
        assert [base for base in cls.__mro__ if base in classes] == [cls], f"{cls.__name__} subclasses another backend"


@pytest.mark.parametrize("make", [ProcessSandbox, DockerSandbox, EpisodeLease], ids=lambda make: make.__name__)
def test_every_sandbox_the_service_drives_has_what_it_reads_before_start(make):
    sandbox = make()
    missing = [name for name in EPISODE_SURFACE if not hasattr(sandbox, name)]
    assert missing == [], f"{make.__name__} lacks {missing}"
    assert sandbox.facts == {} and sandbox.tools is None and sandbox.reset_info == {}
    assert sandbox.last_artifact is None and sandbox.observation_error is None and not sandbox.alive
    sandbox.interrupt()  # harmless before start
    sandbox.close()


def _probes(path: Path) -> list[str]:
    """getattr(...) calls in `path` whose object is a sandbox or a policy."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.args:
            target = ast.unparse(node.args[0])
            if "sandbox" in target or "policy" in target:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: getattr({target}, ...)")
    return found


def test_the_episode_service_reads_sandboxes_without_getattr_probes():
    probes = [probe for path in sorted((REPO / "runs").rglob("*.py")) for probe in _probes(path)]
    assert probes == []


class PlainSandbox(Sandbox):
    """A backend in a few lines: the runner as a plain child process, no isolation of its own."""

    backend = "plain"

    def _launch(self, layers: IsolationLayers) -> subprocess.Popen:
        layers.lack("filesystem_view", "pid_namespace", "cgroup", note="a plain child process")
        self._refuse_if_weak(layers)
        return subprocess.Popen(
            [self.config.python, "-S", "-B", str(RUNNER_PATH)], cwd=self.workdir, start_new_session=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": os.pathsep.join(default_python_path())},
        )

    def _spawn_facts(self, layers: IsolationLayers) -> dict:
        return {"backend": self.backend, "uid": self.uid, "notes": layers.notes,
                "isolation": {"weak_layers": layers.weak}}

    def interrupt(self) -> None:
        if self._proc is not None and not self._closed and self._proc.returncode is None:
            self._killed_by_us = True
            os.killpg(self._proc.pid, signal.SIGKILL)

    def _kill(self) -> None:
        if self._proc is None:
            return
        self._dead = True
        self.interrupt()
        self._proc.wait(timeout=5)
        self._close_pipes()


ARTIFACT_TOOLS = [{"name": "add", "description": "add n"}]
ARTIFACT_ENV = """
class Env:
    tools = [{"name": "add", "description": "add n"}]

    def reset(self, task, seed):
        self.n = 0
        self.reset_info = {"goal": task["goal"]}
        return 0

    def step(self, action):
        self.n += int(action)
        return self.n, 1.0, self.n >= 2, False, {}

    def take_artifact(self):
        return {"type": "image/jpeg", "base64": "/9j/4AAQSkZJRg=="}

    def verify(self):
        return (1.0 if self.n == 2 else 0.0), f"n={self.n}"
"""


@pytest.mark.django_db(transaction=True)
def test_a_minimal_sandbox_subclass_plays_a_whole_rollout_through_the_episode_service(team, owner):
    version = package_version(team, owner, "plain", ARTIFACT_ENV, tasks=[{"id": "t1", "goal": 2}])
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner),
                              task_ids=["t1"], seeds=[0], enqueue=False)
    claim = rollout_claim(run.rollouts.get().pk)
    assert claim.rollout is not None, claim.skip
    setup = episode_setup(rollout=Rollout.objects.get(pk=claim.rollout.pk), driver="session")
    sandbox = PlainSandbox(SandboxConfig(allow_weak=True))
    episode = episode_start(setup=setup, sandbox=sandbox)
    assert episode.label == "env.py" and episode.reset_info == {"goal": 2} and episode.tools == ARTIFACT_TOOLS
    assert episode.artifact_url  # the reset's artifact, read off the sandbox and stored
    assert episode_step(episode=episode, action=1)["reward"] == 1.0
    assert episode_step(episode=episode, action=1)["terminated"] is True
    rollout = episode_finish(episode=episode)
    assert rollout.status == "succeeded", rollout.error
    assert rollout.verifier_reward == 1.0 and rollout.verifier_reason == "n=2"
    assert rollout.reproduction["sandbox"]["backend"] == "plain"
    assert rollout.reproduction["tools"] == ARTIFACT_TOOLS
    assert not sandbox.alive and sandbox.workdir is None
