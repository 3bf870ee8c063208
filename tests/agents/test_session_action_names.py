"""The actions' names a person sees, for the episodes a client or a player drives on an episode host: the
sessions API's `action_space` names them as the version renames them ([actions] names over the
environment's own), and so does play's "Action space:" line, the space otherwise as the episode gave it."""
import html

import pytest

from tests.conftest import login
from tests.processes import episode_host, episode_host_prefix  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("episode_host")]

ENV_PY = """
class Env:
    action_space = {"type": "discrete", "n": 4, "names": ["NOOP", "FIRE", "RIGHT", "LEFT"]}

    def reset(self, task, seed):
        return 0

    def step(self, action):
        return int(action), 0.0, True, False, {}
"""
RENAMED = ["NOOP", "FIRE", "UP", "DOWN"]


@pytest.fixture
def renamed(team, owner):
    from environments import services as env_services

    version = package_version(team, owner, "renamed", ENV_PY)
    files = {**version.files, "environment.toml": version.files["environment.toml"]
             + '\n[actions]\nnames = ["NOOP", "FIRE", "UP", "DOWN"]\n'}
    return env_services.version_commit(environment=version.environment, actor=owner, message="names", files=files)


def test_the_sessions_api_names_the_actions_as_the_version_renames_them(owner_api, renamed):
    response = owner_api.post("/sessions", {"version": renamed.label, "task_id": "t1", "seed": 0})
    assert response.status_code == 201, response.content
    opened = response.json()
    assert opened["action_space"] == {"type": "discrete", "n": 4, "names": RENAMED}
    assert owner_api.post(f"/sessions/{opened['session_id']}/close").status_code == 200


def test_plays_action_space_line_names_the_actions_as_its_buttons_do(team, owner, renamed):
    client = login(owner)
    started = client.post(f"/t/{team.slug}/play/start/", {"version": renamed.label, "task_id": "t1", "seed": "0"})
    assert started.status_code == 302, started.content
    page = client.get(started["Location"]).content.decode()
    line = html.unescape(page.split("Action space: <code>", 1)[1].split("</code>", 1)[0])
    assert '"names": ["NOOP", "FIRE", "UP", "DOWN"]' in line and "RIGHT" not in line
    client.post(started["Location"].rstrip("/") + "/finish/")
