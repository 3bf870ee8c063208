"""The Python client as users install it: pip takes it from a live studio's /client/python into a
fresh virtual environment, and there, outside the checkout, it plays an episode over the API; the
wheel has its own address; and nothing of the client imports Django."""
import hashlib
import io
import json
import re
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import httpx
import pytest

from runs.models import Rollout
from studio import services as studio_services
from tests.conftest import login
from tests.processes import REPO, asgi_server, episode_host, episode_host_prefix  # noqa: F401 - fixtures


# PEP 427: name-version-pythontag-abitag-platformtag.whl
WHEEL_NAME = re.compile(r"^studio_client-\d+\.\d+\.\d+-py3-none-any\.whl$")
CLIENT_MODULES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "studio_client").glob("*.py")
                        if p.name != "distribution.py")


@pytest.fixture
def token(episode_host, asgi_server, owner, team):  # noqa: F811 - the host first: the server reaches it
    _, raw = studio_services.token_create(team=team, actor=owner, name="installed client")
    return raw


def fresh_venv(folder: Path) -> Path:
    """A new virtual environment without pip whose dependencies resolve offline from this test's own
    environment (a .pth line after its own site-packages): pip must find httpx, gymnasium, numpy and the
    extras' packages installed, in the ranges the client declares, and install only the client itself."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "main_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def pip_install(python: Path, *requirements: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(python.parents[1])}  # no PYTHONPATH, no pip config of this machine
    result = subprocess.run(
        [python, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check", "-q", *requirements],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]


EPISODE = textwrap.dedent("""
    import json, sys
    import studio_client
    from studio_client import StudioClient, StudioEnv

    base_url, token = sys.argv[1], sys.argv[2]
    with StudioClient(base_url, token) as client:
        env = StudioEnv(client, "inventory-tools@1")
        observation, info = env.reset(seed=0, options={"task_id": "q1"})
        observation, reward, *_ = env.step({"tool": "lookup_item", "arguments": {"name": "blue widget"}})
        quantity = observation["last_tool_result"]["quantity"]
        *_, terminated, truncated, _ = env.step({"tool": "submit_answer", "arguments": {"answer": str(quantity)}})
        env.close()
    print(json.dumps({"file": studio_client.__file__, "version": studio_client.__version__,
                      "rollout_id": info["rollout_id"], "terminated": terminated, "result": env.last_result,
                      "django": sorted(name for name in sys.modules if name.split(".")[0] == "django")}))
""")


@pytest.mark.django_db(transaction=True)
def test_pip_installs_the_client_from_the_studio_url_and_it_plays_an_episode_outside_the_checkout(
        asgi_server, token, inventory, tmp_path):  # noqa: F811
    python = fresh_venv(tmp_path / "venv")
    # What the docs tell a user to type, with both extras: their packages must be in the declared ranges.
    pip_install(python, f"studio_client[inspect,verifiers] @ {asgi_server}/client/python")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "episode.py").write_text(EPISODE)
    run = subprocess.run([python, "-I", "episode.py", asgi_server, token], cwd=elsewhere,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)

    assert Path(report["file"]).is_relative_to(tmp_path / "venv")  # the installed copy, not the checkout's
    assert report["version"] == "0.1.0" and report["django"] == []
    assert report["terminated"] and report["result"]["status"] == "succeeded"
    rollout = Rollout.objects.get(pk=report["rollout_id"])
    assert (rollout.task_id, rollout.status, rollout.step_count, rollout.run.agent.kind) == ("q1", "succeeded", 2, "remote")
    assert [step.action["tool"] for step in rollout.steps.order_by("index")] == ["lookup_item", "submit_answer"]


@pytest.mark.django_db(transaction=True)
def test_the_wheel_has_its_own_address_listed_with_its_hash(asgi_server, tmp_path):  # noqa: F811
    page = httpx.get(f"{asgi_server}/client/python/")
    assert page.status_code == 200
    links = dict(re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page.text))
    (wheel_url,) = [url for url in links if url.endswith(".whl")]
    response = httpx.get(asgi_server + wheel_url)
    name = wheel_url.rsplit("/", 1)[1]
    assert response.status_code == 200 and WHEEL_NAME.match(name), name
    assert f'filename="{name}"' in response.headers["content-disposition"]
    assert hashlib.sha256(response.content).hexdigest() == links[wheel_url]

    wheel = zipfile.ZipFile(io.BytesIO(response.content))
    modules = sorted(entry for entry in wheel.namelist() if not entry.startswith("studio_client-"))
    assert modules == CLIENT_MODULES  # every module of the checkout's client, and no build backend
    metadata = wheel.read(f"{name.split('-py3')[0]}.dist-info/METADATA").decode()
    assert {"Provides-Extra: inspect", "Provides-Extra: verifiers"} <= set(metadata.splitlines())
    assert not re.search(r"(?im)^Requires-Dist: django", metadata)

    python = fresh_venv(tmp_path / "venv")
    pip_install(python, asgi_server + wheel_url)
    shown = subprocess.run([python, "-m", "pip", "show", "-f", "studio_client"], capture_output=True, text=True, check=True)
    assert "studio_client/gym.py" in shown.stdout and str(tmp_path / "venv") in shown.stdout

    missing = httpx.get(f"{asgi_server}/client/python/studio_client-9.9.9-py3-none-any.whl")
    assert missing.status_code == 404 and name in missing.text


def test_the_client_and_its_adapters_import_no_django():
    # The adapters' imports (inspect_ai, verifiers) take most of this test's seconds. A fresh interpreter (-I: no cwd, no PYTHONPATH) that sees the checkout's studio_client and the
    # installed packages; Django is installed there, so only what the client imports decides.
    modules = [f"studio_client.{Path(path).stem}" for path in CLIENT_MODULES if not path.endswith("__init__.py")]
    code = textwrap.dedent(f"""
        import importlib, json, sys
        sys.path.insert(0, {str(REPO)!r})
        for name in {modules!r}:
            importlib.import_module(name)
        print(json.dumps(sorted(name for name in sys.modules
                                if name.split(".")[0] in ("django", "ninja", "studio", "runs", "environments"))))
    """)
    run = subprocess.run([sys.executable, "-I", "-c", code], cwd="/", capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == []
    assert "studio_client.inspect_task" in modules and "studio_client.verifiers_taskset" in modules


def test_the_team_settings_page_shows_the_install_command_of_this_studio(owner, team):
    page = login(owner).get(f"/t/{team.slug}/settings/")
    (url,) = re.findall(r'<code id="client-install" class="copyable">pip install (\S+)</code>', page.content.decode())
    assert url == "http://testserver/client/python"
    sdist = login(owner).get("/client/python")
    assert sdist.status_code == 200 and sdist["Content-Type"] == "application/x-gzip"
    assert re.fullmatch(r'attachment; filename="studio_client-\d+\.\d+\.\d+\.tar\.gz"', sdist["Content-Disposition"])
