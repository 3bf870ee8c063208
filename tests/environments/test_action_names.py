"""Named discrete actions: a space's own `names` (the SDK reads ALE-style `get_action_meanings()`), a
version's `[actions] names` and `keys`, checked at commit (the API says which line is wrong), and the
keys play mode derives (runs/action_names.py; the page itself: tests/browser/test_play_named_actions.py)."""
import io
import zipfile

import gymnasium
import pytest
from gymnasium import spaces

from environments.sdk.studio_sdk import GymnasiumEnvironment, action_space_problem
from runs.action_names import action_names, play_controls

ENV_PY = "class Env:\n    action_space = {'type': 'discrete', 'n': 3}\n    def reset(self, task, seed):\n        return 0\n"


class Meaningful(gymnasium.Env):
    """A Discrete(4) Gymnasium env that names its actions as ALE does."""

    action_space = spaces.Discrete(4)
    observation_space = spaces.Discrete(1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, True, False, {}

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "UP", "DOWN"]


def test_a_gymnasium_env_that_names_its_actions_publishes_the_names():
    gymnasium.register(id="StudioMeaningful-v0", entry_point=Meaningful)
    env = GymnasiumEnvironment("StudioMeaningful-v0")
    env.reset({"id": "t1"}, 0)
    assert env.action_space == {"type": "discrete", "n": 4, "start": 0, "names": ["NOOP", "FIRE", "UP", "DOWN"]}
    assert GymnasiumEnvironment("FrozenLake-v1").action_space == {"type": "discrete", "n": 4, "start": 0}


def test_names_must_name_every_action_of_the_space():
    assert action_space_problem({"type": "discrete", "n": 2, "names": ["A", "B"]}) is None
    assert "names must be a list of n=3" in action_space_problem({"type": "discrete", "n": 3, "names": ["A", "B"]})


def package(actions: str) -> bytes:
    toml = f'name = "named"\nkind = "python"\nentrypoint = "env:Env"\n\n[actions]\n{actions}\n'
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("environment.toml", toml)
        archive.writestr("env.py", ENV_PY)
        archive.writestr("tasks.jsonl", '{"id": "t1"}\n')
    return data.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize("actions,reason", [
    ('names = ["STAY", "STAY"]', "actions.names must be a list of distinct names"),
    ('names = ["STAY", "LEFT"]\nkeys = { ArrowUp = "JUMP" }', "actions.keys.ArrowUp names 'JUMP', which is not in actions.names"),
    ('keys = { ArrowUp = 1.5 }', "actions.keys.ArrowUp must be an action's name or number"),
    ('labels = ["A"]', "[actions] knows names and keys, not 'labels'"),
])
def test_a_bad_actions_table_is_refused_at_commit_naming_its_line(owner_api, actions, reason):
    from django.core.files.uploadedfile import SimpleUploadedFile

    r = owner_api.post("/packages", {"file": SimpleUploadedFile("named.zip", package(actions))}, content_type=None)
    assert r.status_code == 400, r.content
    assert reason in r.content.decode(), r.json()
    assert "environment.toml" in r.content.decode()


@pytest.mark.django_db
def test_a_good_actions_table_is_committed(owner_api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    good = package('names = ["STAY", "LEFT", "RIGHT"]\nkeys = { Left = "LEFT", Right = 2, Space = "STAY" }')
    r = owner_api.post("/packages", {"file": SimpleUploadedFile("named.zip", good)}, content_type=None)
    assert r.status_code == 201, r.content


def test_the_versions_names_win_over_the_environments_and_keys_follow_them():
    space = {"type": "discrete", "n": 6, "names": ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]}
    manifest = {"actions": {"names": ["NOOP", "FIRE", "UP", "DOWN", "UP+FIRE", "DOWN+FIRE"],
                            "keys": {"ArrowUp": "UP", "ArrowDown": "DOWN", "Space": "FIRE"}}}
    assert action_names(manifest=manifest, action_space=space)["2"] == "UP"
    assert action_names(manifest={}, action_space=space)["2"] == "RIGHT"
    controls = play_controls(manifest=manifest, action_space=space)
    assert controls["keys"] == {"ArrowUp": 2, "ArrowDown": 3, " ": 1}
    # Without [actions] keys: digits for every action, arrows and space for actions so named.
    controls = play_controls(manifest={}, action_space={"type": "discrete", "n": 3, "start": 1, "names": ["STAY", "LEFT", "RIGHT"]})
    assert controls["keys"] == {"1": 1, "2": 2, "3": 3, "ArrowLeft": 2, "ArrowRight": 3}
    assert [b["name"] for b in controls["buttons"]] == ["STAY", "LEFT", "RIGHT"]
    assert play_controls(manifest={}, action_space={"type": "box", "shape": [2], "low": 0, "high": 1, "dtype": "float32"}) is None
