"""Declared dependencies: validated at commit, built once per set with uv into a read-only directory,
checked (plugin ids) inside it, shown on the version page and API, and refused to run until ready.

The plugin is a tiny wheel made by the test (tests/environments/depenv_support.py); numpy and
Gymnasium come from the machine's pip configuration (its local mirrors and uv's cache).
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from environments import package
from environments import services as env_services
from environments.dependencies import builder
from environments.dependencies import services as dependency_services
from environments.models import DependencyEnvironment, DependencyStatus
from runs import services as run_services
from tests.conftest import login
from tests.environments.depenv_support import (  # noqa: F401 - fixtures
    bare_trajectory, build, commit, deps, depenv_root, package_files, plugin_wheels, stored_plain,
)
from tests.processes import free_port
from tests.runs.conftest import docker_image_name  # noqa: F401 - fixture: skips without an engine
from tests.runs.rollout_factories import play_one, scripted_agent

PLUGIN = "studio-counter-plugin==1.0.0"
PLUGIN_ENTRYPOINT = "gymnasium:studio_counter_plugin:StudioCounter-v0"
ALWAYS_ADD = "def act(observation, info):\n    return 1\n"


# -- validation (no build) ----------------------------------------------------------------------------


def test_bad_requirements_are_refused_with_file_and_line():
    files = package_files(entrypoint="gymnasium:CartPole-v1", dependencies=["minigrid==3.0.0", "numpy>="])
    files["requirements.txt"] = "# ours\nrequests==2.0\n--index-url http://evil/simple\nfoo @ file:///etc/passwd\n"
    problems = [(p.file, p.line, p.reason) for p in package.validate_package(files)]
    assert [(file, line) for file, line, _ in problems] == [
        ("environment.toml", 5), ("requirements.txt", 3), ("requirements.txt", 4),
    ]
    assert "'numpy>=' is not a pip requirement" in problems[0][2]
    assert "options such as '--index-url' are not allowed" in problems[1][2]
    assert "direct references ('name @ url') are not allowed" in problems[2][2]


def test_dependencies_must_be_a_list_of_strings():
    files = package_files(entrypoint="gymnasium:CartPole-v1")
    files["environment.toml"] = files["environment.toml"].replace("max_steps = 40\n", "max_steps = 40\ndependencies = \"minigrid\"\n")
    (problem,) = package.validate_package(files)
    assert (problem.file, problem.line) == ("environment.toml", 5)
    assert "must be a list of requirement strings" in problem.reason


def test_plugin_entrypoint_must_name_a_module():
    files = package_files(entrypoint="gymnasium:mini-grid:MiniGrid-Empty-5x5-v0", dependencies=["minigrid==3.0.0"])
    (problem,) = package.validate_package(files)
    assert problem.line == 3 and "'mini-grid' is not a Python module name" in problem.reason


def test_unknown_builtin_id_without_dependencies_says_how_to_name_a_plugin():
    files = package_files(entrypoint="gymnasium:MiniGrid-Empty-5x5-v0")
    (problem,) = package.validate_package(files)
    assert "unknown Gymnasium environment id 'MiniGrid-Empty-5x5-v0'" in problem.reason
    assert "gymnasium:module:EnvId" in problem.reason


def test_same_requirements_in_any_spelling_share_one_environment(deps, team, owner):
    first = commit(team, owner, "spelled-a", package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=["Studio_Counter.Plugin == 1.0.0"]))
    second = commit(team, owner, "spelled-b", package_files(entrypoint=PLUGIN_ENTRYPOINT, requirements_txt=f"{PLUGIN}  # the plugin\n"))
    assert first.dependency_environment_id == second.dependency_environment_id
    assert first.dependency_environment.requirements == [PLUGIN]
    assert first.dependency_environment.base_requirements == list(builder.base_requirements())
    without = commit(team, owner, "no-deps", package_files(entrypoint="gymnasium:CartPole-v1"))
    assert without.dependency_environment is None
    assert dependency_services.version_python_path(without) is None


# -- building, checking, running ----------------------------------------------------------------------


def test_plugin_version_builds_once_checks_its_id_in_the_set_and_matches_gymnasium(deps, team, owner):
    good = commit(team, owner, "counter", package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=[PLUGIN]))
    broken = commit(team, owner, "broken", package_files(entrypoint="gymnasium:studio_broken_plugin:Anything-v0", dependencies=[PLUGIN]))
    assert good.dependency_environment_id == broken.dependency_environment_id
    assert good.dependency_environment.status == DependencyStatus.BUILDING

    agent = scripted_agent(team, owner, ALWAYS_ADD)
    with pytest.raises(dependency_services.DependenciesNotReady, match="still being built"):
        run_services.run_create(team=team, actor=owner, version=good, agent=agent, seeds=[0])

    assert build(good) == "ready"
    depenv = good.dependency_environment
    assert depenv.status == DependencyStatus.READY and depenv.error == ""
    assert "studio-counter-plugin==1.0.0" in depenv.log
    site = Path(dependency_services.version_python_path(good)[1])
    assert site == deps / depenv.sha256 / "site-packages"
    assert not os.stat(site).st_mode & 0o222, "the environment is read-only"
    assert (site / "studio_counter_plugin").is_dir()

    assert dependency_services.version_dependencies(good)["entrypoint_check"]["ok"] is True
    assert dependency_services.version_run_refusal(good) is None
    broken.dependency_environment.refresh_from_db()
    reason = dependency_services.version_run_refusal(broken)
    assert "the plugin exploded on import" in reason and "studio_broken_plugin" in reason
    with pytest.raises(dependency_services.DependenciesNotReady, match="exploded on import"):
        run_services.run_create(team=team, actor=owner, version=broken, agent=agent, seeds=[0])

    # A second build of the same set is a cache hit: nothing rebuilt, the same directory.
    assert build(good) == "ready"
    assert sorted(p.name for p in deps.iterdir() if not p.name.startswith(".")).count(depenv.sha256) == 1

    rollout = play_one(team, owner, good, agent, task_id="t1", seed=7)
    steps = list(rollout.steps.order_by("index").values_list("action", "observation", "reward", "terminated", "truncated"))
    bare = bare_trajectory(str(site), "studio_counter_plugin:StudioCounter-v0", 7, [action for action, *_ in steps])
    assert stored_plain(rollout.initial_observation, rollout_id=rollout.pk) == bare["reset"]
    assert [[stored_plain(step[1], rollout_id=rollout.pk), *step[2:]] for step in steps] == bare["steps"]


# The agent imports the plugin, which only the version's dependency environment holds.
PLUGIN_AGENT = """
    from studio_counter_plugin.env import CounterEnv

    def act(observation, info):
        return 1 if observation[0] < CounterEnv().target else 0
"""


@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_scripted_agent_imports_from_the_versions_dependency_environment(deps, settings, request, team, owner, backend):
    if backend == "docker":
        request.getfixturevalue("docker_image_name")  # skips with the reason where no engine answers
    settings.SANDBOX_BACKEND = backend
    version = commit(team, owner, "counter", package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=[PLUGIN]))
    assert build(version) == "ready"
    rollout = play_one(team, owner, version, scripted_agent(team, owner, PLUGIN_AGENT), task_id="t1", seed=3)
    assert rollout.status == "succeeded", rollout.error
    assert rollout.steps.exists() and set(rollout.steps.values_list("action", flat=True)) == {1}
    # The same agent in a version without that set cannot import it: the sandbox holds only the studio's path.
    plain = commit(team, owner, "cartpole", package_files(entrypoint="gymnasium:CartPole-v1"))
    rollout = play_one(team, owner, plain, scripted_agent(team, owner, PLUGIN_AGENT, name="again"), task_id="t1")
    assert rollout.status == "errored" and "No module named 'studio_counter_plugin'" in rollout.error


def test_commit_checks_the_id_at_once_when_the_set_is_built(deps, team, owner):
    version = commit(team, owner, "counter", package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=[PLUGIN]))
    build(version)
    env = env_services.environment_create(team=team, actor=owner, name="again", slug="again")
    with pytest.raises(env_services.InvalidVersion) as refused:
        env_services.version_commit(
            environment=env, actor=owner, message="typo",
            files=package_files(entrypoint="gymnasium:studio_counter_plugin:StudioCountr-v0", dependencies=[PLUGIN]),
        )
    (problem,) = refused.value.problems
    assert problem.line == 3 and "StudioCountr-v0" in problem.reason and "doesn't exist" in problem.reason
    assert not env.versions.exists()
    ok = env_services.version_commit(environment=env, actor=owner, message="fixed",
                                     files=package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=[PLUGIN]))
    assert dependency_services.version_run_refusal(ok) is None


@pytest.mark.parametrize(
    ("requirement", "index", "expected"),
    [
        ("studio-surely-no-such-package==1.0", None, "not found in the package registry"),
        ("gymnasium==0.29.1", None, "The studio pins"),
        ("studio-counter-plugin==1.0.0", "closed-port", "Connection refused"),
        ("studio-sdist-only==1.0.0", None, "has no usable wheels and you require studio-sdist-only==1.0.0"),
    ],
    ids=["unknown-package", "conflicting", "unreachable-registry", "fails-to-build"],
)
def test_failed_builds_say_why_leave_nothing_behind_and_refuse_runs(deps, settings, team, owner, requirement, index, expected):
    if index == "closed-port":
        settings.DEPENV_INDEX_URL = f"http://127.0.0.1:{free_port()}/simple"
        settings.DEPENV_FIND_LINKS = []
    before = {p.name for p in deps.iterdir()}
    files = package_files(entrypoint="gymnasium:CartPole-v1", dependencies=[requirement, "six"])
    version = commit(team, owner, "failing", files)
    assert build(version) == "failed"
    depenv = version.dependency_environment
    assert depenv.status == DependencyStatus.FAILED
    assert expected in depenv.error, depenv.error
    if "wheels" in expected:
        assert "The studio installs wheels only" in depenv.error
    assert {p.name for p in deps.iterdir()} <= before | {".locks"}, "no directory half-written"
    with pytest.raises(dependency_services.DependenciesNotReady, match="failed to build"):
        run_services.run_create(team=team, actor=owner, version=version,
                                agent=scripted_agent(team, owner, ALWAYS_ADD), seeds=[0])
    # A new commit of the same set tries again (the registry may be back).
    env = version.environment
    files["tasks.jsonl"] += '{"id": "t3"}\n'
    again = env_services.version_commit(environment=env, actor=owner, message="retry", files=files)
    assert again.dependency_environment_id == depenv.pk
    assert DependencyEnvironment.objects.get(pk=depenv.pk).status == DependencyStatus.BUILDING


def test_version_page_and_api_show_the_build(deps, team, owner, outsider, owner_api, outsider_api):
    version = commit(team, owner, "counter", package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=[PLUGIN]))
    client = login(owner)
    page = client.get(f"/t/{team.slug}/environments/counter/versions/1/").content.decode()
    assert "Dependencies" in page and 'data-status="building"' in page and 'hx-trigger="every 2s"' in page
    body = owner_api.get("/environments/counter/versions/1").json()["dependencies"]
    assert body["status"] == "building" and body["requirements"] == [PLUGIN] and "still being built" in body["refusal"]
    refused = owner_api.post("/runs", {"version": "counter@1", "agent": "random", "seeds": "0"})
    assert refused.status_code == 409 and "still being built" in refused.json()["detail"], refused.content

    build(version)
    panel = client.get(f"/t/{team.slug}/environments/counter/versions/1/dependencies/", HTTP_HX_REQUEST="true").content.decode()
    assert 'data-status="ready"' in panel and "hx-trigger" not in panel and "Gymnasium made" in panel
    body = owner_api.get("/environments/counter/versions/1").json()["dependencies"]
    assert body["status"] == "ready" and body["entrypoint_check"]["ok"] and body["refusal"] is None
    assert "studio-counter-plugin==1.0.0" in body["log"]

    assert outsider_api.get("/environments/counter/versions/1").status_code == 404
    assert login(outsider).get(f"/t/{team.slug}/environments/counter/versions/1/dependencies/").status_code in (403, 404)


def test_index_credentials_never_reach_the_build_log(deps, settings, team, owner):
    settings.DEPENV_INDEX_URL = f"http://builder:hunter2-secret@127.0.0.1:{free_port()}/simple"
    settings.DEPENV_FIND_LINKS = []
    version = commit(team, owner, "secret-index", package_files(entrypoint="gymnasium:CartPole-v1", dependencies=["six==1.17.0"]))
    assert build(version) == "failed"
    depenv = version.dependency_environment
    assert "Connection refused" in depenv.error
    assert "hunter2-secret" not in depenv.log + depenv.error and "builder:" not in depenv.log
    assert "http://***@127.0.0.1" in depenv.log


def test_docker_sandbox_mounts_the_dependency_environment_read_only_at_its_path(tmp_path):
    from runs.sandbox import SandboxConfig, docker_image
    from runs.sandbox.docker import DockerSandbox
    from runs.sandbox.process import SDK_PATH

    site = "/srv/depenvs/0123abcd/site-packages"
    sandbox = DockerSandbox(SandboxConfig(python_path=(str(SDK_PATH), site)), image="studio-sandbox:test")
    sandbox.container, sandbox.workdir, sandbox.uid = "studio-sb-test", tmp_path, 60001
    argv = sandbox._docker_argv("studio-sandbox:test", 60001)
    assert f"{site}:{site}:ro" in argv
    pythonpath = next(arg for arg in argv if arg.startswith("PYTHONPATH="))
    assert pythonpath.endswith(f":{site}") and docker_image.SITE_PACKAGES_IN_IMAGE not in pythonpath
    default = DockerSandbox(SandboxConfig(), image="studio-sandbox:test")
    default.container, default.workdir, default.uid = "studio-sb-test", tmp_path, 60001
    assert not any(arg.startswith("/srv/depenvs") for arg in default._docker_argv("studio-sandbox:test", 60001))


def test_building_the_sandbox_image_removes_no_other_image(tmp_path):
    """Another studio on the same docker host keeps its images (a docker client that records its calls
    stands in for the engine, which these machines do not run by default)."""
    from runs.sandbox import docker_image

    calls = tmp_path / "calls"
    client = tmp_path / "docker"
    client.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$1 $2" in "image inspect") exit 1;; "images "*) echo studio-sandbox:other; exit 0;; esac\n'
        "cat > /dev/null\n"
    )
    client.chmod(0o755)
    name = docker_image.ensure_image(docker=str(client))
    commands = calls.read_text().splitlines()
    assert any(command.startswith("import") for command in commands) and name
    assert not any(command.startswith(("rmi", "image rm", "image prune", "system prune")) for command in commands), commands


def test_a_set_built_on_another_host_is_built_here_before_the_first_sandbox(deps, settings, team, owner, tmp_path):
    version = commit(team, owner, "counter", package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=[PLUGIN]))
    assert build(version) == "ready"
    # This worker host has its own, empty root: the database says ready, the directory is not here yet.
    here = Path(tempfile.mkdtemp(prefix="studio-depenvs-host2-"))
    try:
        settings.DEPENV_ROOT = here
        python_path = dependency_services.version_python_path(version)
        assert python_path[1] == str(here / version.dependency_environment.sha256 / "site-packages")
        assert (Path(python_path[1]) / "studio_counter_plugin" / "__init__.py").is_file()
    finally:
        for folder, _dirs, _files in os.walk(here):
            os.chmod(folder, 0o755)
        shutil.rmtree(here, ignore_errors=True)


def test_audits_load_a_plugin_environment_in_its_dependency_environment(deps, team, owner):
    """An audit's own sandboxes (the action space its probes speak, replays for verifier regression)
    import the plugin from the version's set, as rollouts do."""
    from runs.quality.replay import Replayer
    from runs.quality.services import env_interface

    version = commit(team, owner, "counter", package_files(entrypoint=PLUGIN_ENTRYPOINT, dependencies=[PLUGIN]))
    assert build(version) == "ready"
    assert env_interface(version)["action_space"] == {"type": "discrete", "n": 2, "start": 0}
    rollout = play_one(team, owner, version, scripted_agent(team, owner, ALWAYS_ADD), task_id="t1", seed=2)
    with Replayer(version) as replayer:
        replayed = replayer.replay(rollout)
    assert replayed.error == "" and replayed.diverged_at is None
