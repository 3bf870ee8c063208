"""The `docker` sandbox backend, for what only it has: selection by name, and the container's read-only
root. Every fault case runs on both backends in test_sandbox_faults.py, every escape attempt in
test_sandbox_escape.py (the `backend` fixture of tests/runs/conftest.py).

Needs a Docker engine (scripts/start_docker.sh installs and starts one; .ci/run calls it). No registry
is reachable, so the runtime image is built here from the host's files (runs/sandbox/docker_image.py)
once per content. Where no engine answers, every test that needs one skips with the reason.
"""

import pytest

from runs.sandbox import ProcessSandbox, Sandbox
from runs.sandbox.backends import BACKENDS, sandbox_class, sandbox_for
from tests.runs.conftest import sandbox_starter

pytestmark = pytest.mark.docker


@pytest.fixture
def start_docker(docker_image_name):
    """start_docker(files, mode=..., entrypoint=..., **limits) -> a started DockerSandbox, closed after."""
    from runs.sandbox.docker import DockerSandbox

    start, close_all = sandbox_starter(lambda: DockerSandbox(image=docker_image_name))
    yield start
    close_all()


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


# -- what only a container has --------------------------------------------------------------------


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