"""Versions leave as Harbor task folders and Harbor task folders come in as versions. Harbor's own
task models (harbor 0.25.0: TaskConfig, TaskPaths) read what the studio writes, the exported
tests/test.sh judges an episode played with studio-env, and a Harbor task survives import and export
unchanged."""
import importlib.resources
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from harbor.models.task.config import TaskConfig
from harbor.models.task.paths import TaskPaths

from environments.models import Environment
from tests.conftest import api_for, login
from tests.runs.rollout_factories import package_version, play_one, scripted_agent

pytestmark = pytest.mark.django_db(transaction=True)

GUESS_ENV = """
from studio_sdk import Environment, tool

class Env(Environment):
    tools = [tool("guess", "Guess the number", {"type": "object", "properties": {"n": {"type": "integer"}}})]

    def reset(self, task, seed):
        self.target = task.get("answer")
        self.guesses = []
        return {"prompt": task["prompt"], "knows_answer": self.target is not None}

    def step(self, action):
        self.guesses.append(action["arguments"]["n"])
        return {"guesses": len(self.guesses)}, 0.0, len(self.guesses) >= 2, False, {}

    def verify(self):
        return (1.0, "guessed it") if self.target in self.guesses else (0.0, f"never guessed {self.target}")
"""
TASKS = [{"id": "seven", "difficulty": 1, "prompt": "Guess the secret number.", "answer": 7},
         {"id": "nine", "difficulty": 2, "prompt": "Guess again.", "answer": 9}]


def unpack(data: bytes, into: Path) -> Path:
    if data[:2] == b"PK":
        zipfile.ZipFile(io.BytesIO(data)).extractall(into)
    else:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            archive.extractall(into, filter="data")
    (root,) = into.iterdir()
    return root


def studio_env(folder: Path, episode: Path, *args) -> dict | str:
    done = subprocess.run([sys.executable, str(folder / "environment/studio/studio_episode.py"), *args], check=True,
                          capture_output=True, text=True, env={"STUDIO_EPISODE_DIR": str(episode)})
    return json.loads(done.stdout)


def run_test_sh(folder: Path, logs: Path) -> float:
    """tests/test.sh as Harbor runs it, with its /tests and /logs folders where this machine has them."""
    script = (folder / "tests/test.sh").read_text().replace("/tests/", f"{folder}/tests/").replace("/logs/", f"{logs}/")
    script = script.replace("python3 ", f"{sys.executable} ")
    subprocess.run(["bash", "-c", script], check=True, env={"STUDIO_EPISODE_DIR": str(logs / "agent/studio")})
    return float((logs / "verifier/reward.txt").read_text())


@pytest.fixture
def guess(team, owner):
    return package_version(team, owner, "guess", GUESS_ENV, tasks=TASKS)


@pytest.mark.parametrize("file", ["zip", "tar.gz"])
def test_a_version_exports_as_harbor_tasks_that_harbors_models_read(owner_api, guess, tmp_path, file):
    response = owner_api.get(f"/environments/guess/versions/{guess.number}/harbor", {"file": file})
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="guess-v1-harbor.{file}"'
    root = unpack(response.content, tmp_path)
    assert sorted(p.name for p in root.iterdir()) == ["nine", "seven"]
    for folder in root.iterdir():
        paths = TaskPaths(folder)
        config = TaskConfig.model_validate_toml(paths.config_path.read_text())
        assert config.task.name == f"studio/guess-{folder.name}" and config.metadata["studio_version"] == "guess@1"
        assert paths.discovered_test_path == paths.test_path and (paths.environment_dir / "Dockerfile").exists()
        assert paths.instruction_path.read_text().startswith(f"# guess: task {folder.name}")
        # The agent's container never holds the answer; the verifier's copy in tests/ does.
        container = folder / "environment/studio"
        assert "answer" not in json.loads((container / "task.json").read_text())["task"]
        assert all("answer" not in json.loads(line) for line in (container / "package/tasks.jsonl").read_text().splitlines())
        assert json.loads((folder / "tests/studio/task.json").read_text())["task"]["answer"] in (7, 9)
    assert "Guess the secret number." in (root / "seven/instruction.md").read_text()


def test_the_exported_test_sh_judges_the_episode_played_with_studio_env(owner_api, guess, tmp_path):
    root = unpack(owner_api.get(f"/environments/guess/versions/{guess.number}/harbor").content, tmp_path / "x")
    folder = root / "seven"
    for guesses, reward in (([3, 7], 1.0), ([3, 4], 0.0)):
        logs = tmp_path / f"logs-{reward}"
        first = studio_env(folder, logs / "agent/studio", "start")
        assert first["observation"] == {"prompt": "Guess the secret number.", "knows_answer": False}
        assert [t["name"] for t in first["tools"]] == ["guess"]
        for n in guesses:
            studio_env(folder, logs / "agent/studio", "step", json.dumps({"tool": "guess", "arguments": {"n": n}}))
        over = subprocess.run([sys.executable, str(folder / "environment/studio/studio_episode.py"), "step", "1"],
                              capture_output=True, text=True, env={"STUDIO_EPISODE_DIR": str(logs / "agent/studio")})
        assert over.returncode == 2 and "the episode is over" in over.stderr
        assert run_test_sh(folder, logs) == reward
        assert ("guessed it" if reward else "never guessed 7") in (logs / "verifier/reason.txt").read_text()


def harbor_template(tmp_path) -> Path:
    """Harbor's own `harbor init` task template, made into a task: write hello.txt in /app."""
    folder = tmp_path / "hello-world"
    template = importlib.resources.files("harbor") / "cli" / "template-task"
    for name in ("task.toml", "environment/Dockerfile", "solution/solve.sh", "tests/Dockerfile"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text((template / name).read_text())
    (folder / "instruction.md").write_text("Create /app/hello.txt containing 'Hello, world!'.\n")
    (folder / "tests/test.sh").write_text(
        "#!/bin/bash\nif grep -qx 'Hello, world!' /app/hello.txt; then echo 1 > /logs/verifier/reward.txt;"
        " else echo 0 > /logs/verifier/reward.txt; fi\n")
    return folder


def archive(folder: Path, *, skip=()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.relative_to(folder).as_posix() not in skip:
                z.write(path, f"{folder.name}/{path.relative_to(folder).as_posix()}")
    return buffer.getvalue()


def upload(api, data: bytes, name="hello-world.zip", **form):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return api.post("/harbor/tasks", {"file": SimpleUploadedFile(name, data), **form}, content_type=None)


def test_a_harbor_task_imports_as_a_version_and_exports_as_the_same_files(owner_api, team, owner, tmp_path):
    folder = harbor_template(tmp_path)
    response = upload(owner_api, archive(folder))
    assert response.status_code == 201, response.content
    version = response.json()
    assert version["label"] == "hello-world@1"
    assert "harbor/hello-world/tests/test.sh" in version["paths"] and "env.py" in version["paths"]
    detail = owner_api.get("/environments/hello-world/versions/1").json()
    (task,) = [json.loads(line) for line in detail["files"]["tasks.jsonl"].splitlines()]
    assert task["id"] == "hello-world" and task["instruction"].startswith("Create /app/hello.txt")

    exported = unpack(owner_api.get("/environments/hello-world/versions/1/harbor").content, tmp_path / "out")
    original = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    back = {p.relative_to(exported / "hello-world").as_posix(): p.read_bytes()
            for p in (exported / "hello-world").rglob("*") if p.is_file()}
    assert back == original
    TaskConfig.model_validate_toml((exported / "hello-world/task.toml").read_text())


def test_an_imported_harbor_task_plays_in_the_studio_and_its_tests_are_the_verifier(owner_api, team, owner, tmp_path):
    upload(owner_api, archive(harbor_template(tmp_path)))
    version = Environment.objects.get(team=team, slug="hello-world").versions.get(number=1)
    solver = scripted_agent(team, owner, """
        def act(observation, info):
            if "exit_code" in observation:
                return {"tool": "finish", "arguments": {}}
            return {"tool": "bash", "arguments": {"command": "echo 'Hello, world!' > /app/hello.txt && cat /app/hello.txt"}}
    """)
    rollout = play_one(team, owner, version, solver, task_id="hello-world")
    assert rollout.verifier_reward == 1.0, (rollout.status, rollout.error, rollout.verifier_reason)
    assert rollout.steps.get(index=0).observation == {"exit_code": 0, "output": "Hello, world!\n"}
    idle = scripted_agent(team, owner, 'def act(observation, info):\n    return {"tool": "finish", "arguments": {}}\n', name="idle")
    assert play_one(team, owner, version, idle, task_id="hello-world").verifier_reward == 0.0


@pytest.mark.parametrize("missing, named", [
    ("instruction.md", "instruction.md"), ("tests/test.sh", "tests/test.sh"),
    ("environment/Dockerfile", "environment/"), ("task.toml", "task.toml: missing"),
])
def test_a_malformed_harbor_task_is_a_400_naming_what_is_missing_and_writes_nothing(owner_api, team, tmp_path, missing, named):
    response = upload(owner_api, archive(harbor_template(tmp_path), skip={missing}))
    assert response.status_code == 400
    assert named in response.json()["detail"]
    assert not Environment.objects.filter(team=team).exists()


def test_harbor_endpoints_are_team_scoped_and_import_needs_an_author(owner_api, outsider_api, viewer, team, guess, tmp_path):
    assert outsider_api.get(f"/environments/guess/versions/{guess.number}/harbor").status_code == 404
    assert upload(api_for(viewer, team), archive(harbor_template(tmp_path))).status_code == 403
    response = upload(outsider_api, archive(harbor_template(tmp_path)), environment="guess")
    assert response.status_code == 404 and guess.environment.versions.count() == 1
    assert owner_api.get(f"/environments/guess/versions/{guess.number}/harbor", {"file": "rar"}).json()["field"] == "file"


def test_the_pages_export_and_import_harbor_tasks(owner, guess, tmp_path):
    client = login(owner)
    page = client.get(f"/t/{guess.environment.team.slug}/environments/guess/versions/1/")
    assert b'id="harbor-export"' in page.content
    download = client.get(f"/t/{guess.environment.team.slug}/environments/guess/versions/1/harbor/")
    assert download.status_code == 200 and download.content[:2] == b"PK"
    from django.core.files.uploadedfile import SimpleUploadedFile

    imported = client.post(f"/t/{guess.environment.team.slug}/environments/upload/", {
        "file": SimpleUploadedFile("hello-world.zip", archive(harbor_template(tmp_path))), "source": "harbor"})
    assert imported.status_code == 302 and imported["Location"].endswith("/environments/hello-world/versions/1/")


def test_an_archive_of_several_harbor_tasks_is_one_version_with_a_task_each(owner_api, tmp_path):
    first, second = harbor_template(tmp_path / "a"), harbor_template(tmp_path / "b")
    (second / "task.toml").write_text((second / "task.toml").read_text().replace("[metadata]", '[metadata]\ndifficulty = "hard"'))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(first, arcname="suite/hello-world")
        tar.add(second, arcname="suite/hello-again")
    response = upload(owner_api, buffer.getvalue(), name="suite.tar.gz")
    assert response.status_code == 201, response.content
    assert response.json()["label"] == "suite@1"
    files = owner_api.get("/environments/suite/versions/1").json()["files"]
    tasks = [json.loads(line) for line in files["tasks.jsonl"].splitlines()]
    assert [(t["id"], t.get("difficulty")) for t in tasks] == [("hello-again", 3), ("hello-world", None)]
    exported = unpack(owner_api.get("/environments/suite/versions/1/harbor", {"file": "tar.gz"}).content, tmp_path / "out")
    assert sorted(p.name for p in exported.iterdir()) == ["hello-again", "hello-world"]
    assert (exported / "hello-again/task.toml").read_text() == (second / "task.toml").read_text()
