"""Observations as Gymnasium gives them: arrays (binary over the sandbox boundary, stored beside the
step), floats JSON cannot carry, key order, reset info, the observation size limit, truncation by the
studio's limits and the version's success rule, seen by the agent, the API, exports and pages."""
import base64
import json
import math
import textwrap

import numpy as np
import pytest

from environments import services as env_services
from runs import services
from runs.artifacts import ARRAY_KEY, array_from_json, png_array
from runs.figures import run_figures
from runs.models import RolloutStatus, Step
from runs.review.export import export_lines

from tests.conftest import login
from rollout_factories import demo_agent_code, demo_version, package_version, play_one, play_run, scripted_agent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)


ODD_ENV = """
    import numpy as np
    from studio_sdk import Environment

    def observation(n):
        field = np.linspace(-1, 1, 40 * 40, dtype=np.float32).reshape(40, 40)
        field[0, 0], field[0, 1], field[0, 2] = np.nan, np.inf, -0.0
        image = np.zeros((64, 48, 3), dtype=np.uint8)
        image[n:n + 8, 4:12] = (250, 20, 30)
        # Keys in an order no sorting gives: jsonb would reorder them.
        return {"zeta": n, "image": image, "field": field, "nan": float("nan"), "inf": float("inf"),
                "minus_inf": float("-inf"), "minus_zero": -0.0, "small": np.arange(6, dtype=np.int16).reshape(2, 3),
                "alpha": "last"}

    class Env(Environment):
        action_space = {"type": "discrete", "n": 2}

        def reset(self, task, seed):
            self.n = 0
            self.reset_info = {"z_first": 1, "a_second": [1, 2], "seed": seed}
            return observation(0)

        def step(self, action):
            self.n += 1
            return observation(self.n), 1.0, self.n >= 2, False, {"b": 1, "a": 2}
"""

# The agent reports what it received: the action records it.
CHECKING_AGENT = """
    import math
    import numpy as np

    def act(observation, info):
        image, field = observation["image"], observation["field"]
        return {
            "keys": list(observation),
            "image": [type(image).__name__, str(image.dtype), list(image.shape), int(image.sum())],
            "field": [str(field.dtype), list(field.shape), bool(np.isnan(field[0, 0])), bool(np.isposinf(field[0, 1])),
                      bool(np.signbit(field[0, 2]))],
            "floats": [math.isnan(observation["nan"]), observation["inf"] == math.inf,
                       observation["minus_inf"] == -math.inf, math.copysign(1.0, observation["minus_zero"]) < 0],
            "small": [str(observation["small"].dtype), observation["small"].tolist()],
        }
"""


def expected_observation(n):
    field = np.linspace(-1, 1, 40 * 40, dtype=np.float32).reshape(40, 40)
    field[0, 0], field[0, 1], field[0, 2] = np.nan, np.inf, -0.0
    image = np.zeros((64, 48, 3), dtype=np.uint8)
    image[n:n + 8, 4:12] = (250, 20, 30)
    return image, field


def test_arrays_and_odd_floats_reach_the_agent_the_api_and_exports_exactly(team, owner, owner_api):
    version = package_version(team, owner, "odd", ODD_ENV)
    rollout = play_one(team, owner, version, scripted_agent(team, owner, CHECKING_AGENT))
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error

    # The agent got numpy arrays (dtype, shape, bits) and real floats, in the environment's key order.
    action = Step.objects.get(rollout=rollout, index=0).action
    assert action["keys"] == ["zeta", "image", "field", "nan", "inf", "minus_inf", "minus_zero", "small", "alpha"]
    assert action["image"] == ["ndarray", "uint8", [64, 48, 3], 8 * 8 * (250 + 20 + 30)]
    assert action["field"] == ["float32", [40, 40], True, True, True]
    assert action["floats"] == [True, True, True, True]
    assert action["small"] == ["int16", [[0, 1, 2], [3, 4, 5]]]

    # The API: the documented JSON forms, key order kept, stored arrays behind team-checked URLs.
    steps = owner_api.get(f"/rollouts/{rollout.pk}/steps").json()["steps"]
    observation = steps[0]["observation"]
    assert list(observation) == ["zeta", "image", "field", "nan", "inf", "minus_inf", "minus_zero", "small", "alpha"]
    assert observation["nan"] == {"__float__": "nan"} and observation["minus_zero"] == {"__float__": "-0.0"}
    assert observation["inf"] == {"__float__": "inf"} and observation["minus_inf"] == {"__float__": "-inf"}
    assert observation["small"] == {ARRAY_KEY: {"dtype": "int16", "shape": [2, 3], "data": [[0, 1, 2], [3, 4, 5]]}}
    assert list(steps[0]["info"]) == ["b", "a"]
    image_form, field_form = observation["image"][ARRAY_KEY], observation["field"][ARRAY_KEY]
    assert (image_form["dtype"], image_form["shape"]) == ("uint8", [64, 48, 3])
    png = owner_api.client.get(image_form["url"], headers=owner_api.headers)
    assert png["Content-Type"] == "image/png"
    expected_image, expected_field = expected_observation(1)
    assert np.array_equal(png_array(png.content, shape=image_form["shape"]), expected_image)
    assert image_form["url"].endswith(".png") and field_form["url"].endswith(".npz")

    # Reset info and the first observation are kept on the rollout.
    detail = owner_api.get(f"/rollouts/{rollout.pk}").json()
    assert detail["reset_info"] == {"z_first": 1, "a_second": [1, 2], "seed": 0}
    assert list(detail["reset_info"]) == ["z_first", "a_second", "seed"]
    assert detail["initial_observation"]["minus_zero"] == {"__float__": "-0.0"}

    # An export holds the very arrays, inline.
    line = json.loads(next(export_lines(rollout.run.rollouts.all(), decision="all")))
    exported = line["steps"][0]["observation"]
    field = array_from_json(exported["field"][ARRAY_KEY])
    assert field.dtype == np.float32 and field.tobytes() == expected_field.tobytes()  # NaN, inf and -0.0 included
    assert np.array_equal(array_from_json(exported["image"][ARRAY_KEY]), expected_image)
    assert line["reset_info"] == {"z_first": 1, "a_second": [1, 2], "seed": 0}


HUGE_ENV = """
    import numpy as np
    from studio_sdk import Environment

    class Env(Environment):
        action_space = {"type": "discrete", "n": 2}

        def reset(self, task, seed):
            self.n = 0
            return np.zeros(4, dtype=np.uint8)

        def step(self, action):
            self.n += 1
            observation = np.zeros(50_000_000, dtype=np.uint8) if self.n == 2 else np.zeros(4, dtype=np.uint8)
            return observation, 0.5, False, False, {"n": self.n}
"""


def test_an_observation_over_the_limit_is_an_error_on_the_step_and_the_rollout_and_the_worker_goes_on(team, owner):
    version = package_version(team, owner, "huge", HUGE_ENV, limits={"memory_mb": 1024})
    agent = scripted_agent(team, owner, "def act(observation, info):\n    return 0\n")
    rollout = play_one(team, owner, version, agent)
    assert rollout.status == RolloutStatus.ERRORED
    assert "step() observation is 50.0 MB, over the limit of 8 MB ([limits] observation_mb = 8)" in rollout.error
    steps = list(Step.objects.filter(rollout=rollout).order_by("index"))
    assert [s.index for s in steps] == [0, 1]
    assert steps[1].observation is None and "over the limit of 8 MB" in steps[1].info["observation_error"]
    assert steps[1].reward == 0.5  # the rest of the step is real
    # The same worker process runs the next rollout as if nothing happened.
    guess = demo_version(team, owner, "guess_number")
    solver = scripted_agent(team, owner, demo_agent_code("guess_number"), name="solver")
    assert play_one(team, owner, guess, solver).status == RolloutStatus.SUCCEEDED


def test_the_step_where_max_steps_ends_the_episode_says_truncated(team, owner):
    version = package_version(team, owner, "long", ODD_ENV.replace("self.n >= 2", "False"), max_steps=3)
    rollout = play_one(team, owner, version, scripted_agent(team, owner, "def act(o, i):\n    return 0\n"))
    flags = list(Step.objects.filter(rollout=rollout).order_by("index").values_list("terminated", "truncated"))
    assert flags == [(False, False), (False, False), (False, True)]
    assert rollout.end_reason == "max_steps"


PENDULUM_LIKE = """
    from studio_sdk import Environment

    class Env(Environment):
        action_space = {"type": "discrete", "n": 2}

        def reset(self, task, seed):
            self.n = 0
            return 0

        def step(self, action):
            self.n += 1
            return self.n, -float(task_cost(self)), self.n >= 3, False, {}

    def task_cost(env):
        return 30 + env.n
"""


def success_version(team, owner, slug, rule):
    files = {
        "environment.toml": f'name = "{slug}"\nkind = "python"\nentrypoint = "env:Env"\n\n[success]\n{rule}\n',
        "env.py": textwrap.dedent(PENDULUM_LIKE),
        "tasks.jsonl": '{"id": "t1"}\n',
    }
    env = env_services.environment_create(team=team, actor=owner, name=slug, slug=slug, files=files)
    return env_services.version_commit(environment=env, actor=owner, message="test", files=files)


def test_the_versions_success_rule_decides_the_status_and_every_figure(team, owner, owner_api):
    agent = scripted_agent(team, owner, "def act(o, i):\n    return 0\n")
    # Returns are -96 for every rollout: a meaningless 0% by "total reward > 0", a success by the rule.
    lenient = success_version(team, owner, "lenient", "return_at_least = -200")
    strict = success_version(team, owner, "strict", "return_at_least = -50")
    for version, status, rate in ((lenient, RolloutStatus.SUCCEEDED, 1.0), (strict, RolloutStatus.FAILED, 0.0)):
        run = services.run_create(team=team, actor=owner, version=version, agent=agent, seeds=[0, 1])
        assert {r.status for r in play_run(run)} == {status}
        figures = run_figures(run)
        assert figures["success_rate"] == rate and figures["return"]["mean"] == -96.0
        rule = f"return ≥ {-200 if version is lenient else -50}"
        api = owner_api.get(f"/runs/{run.pk}").json()["summary"]
        assert (api["success_rule"], api["success_rate"]) == (rule, rate)
        page = login(owner).get(f"/t/{team.slug}/runs/{run.pk}/").content.decode()
        assert f"success: {rule}" in page


def test_a_bad_success_rule_is_refused_at_commit(team, owner):
    from environments.package import InvalidPackage, parse_manifest

    files = {"environment.toml": 'name = "x"\nkind = "python"\nentrypoint = "env:Env"\n\n[success]\nreturn_above = 1\n',
             "env.py": "class Env: pass\n", "tasks.jsonl": '{"id": "t1"}\n'}
    with pytest.raises(InvalidPackage, match="return_above"):
        parse_manifest(files)


def test_pixel_catch_frames_reach_the_agent_as_arrays_and_are_stored_small(team, owner, owner_api):
    version = demo_version(team, owner, "pixel_catch")
    solver = scripted_agent(team, owner, demo_agent_code("pixel_catch"), name="catcher")
    rollout = play_one(team, owner, version, solver, task_id="slow")
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.verifier_reward == 1.0
    steps = owner_api.get(f"/rollouts/{rollout.pk}/steps", {"limit": 1000}).json()["steps"]
    assert len(steps) == rollout.step_count
    form = steps[10]["observation"][ARRAY_KEY]
    assert (form["dtype"], form["shape"]) == ("uint8", [210, 160, 3])
    png = owner_api.client.get(form["url"], headers=owner_api.headers)
    assert len(png.content) < 30_000
    frame = png_array(png.content, shape=form["shape"])
    assert (frame[190, :, 0] == 200).sum() == 20  # the paddle is where the game drew it


SLOW_ENV = """
    import time
    from studio_sdk import Environment

    class Env(Environment):
        action_space = {"type": "discrete", "n": 2}

        def reset(self, task, seed):
            return 0

        def step(self, action):
            time.sleep(0.3)
            return 0, 0.0, False, False, {}
"""


def test_the_last_step_before_the_time_limit_ends_the_episode_says_truncated(team, owner):
    version = package_version(team, owner, "slow", SLOW_ENV, limits={"episode_timeout_s": 1.2})
    rollout = play_one(team, owner, version, scripted_agent(team, owner, "def act(o, i):\n    return 0\n"))
    assert rollout.status == RolloutStatus.TIMED_OUT
    flags = list(Step.objects.filter(rollout=rollout).order_by("index").values_list("truncated", flat=True))
    assert flags and flags[-1] is True and not any(flags[:-1])


def test_reruns_and_replays_compare_image_frames_by_their_content(team, owner):
    """Stored frames carry a digest: two rollouts compare equal only when their frames are, and a
    replay of the same actions finds no divergence (fresh arrays against stored ones)."""
    from runs.quality.replay import Replayer
    from runs.selectors import compare_trajectories

    version = demo_version(team, owner, "pixel_catch")
    agent = scripted_agent(team, owner, demo_agent_code("pixel_catch"), name="catcher")
    first, again, other_seed = (play_one(team, owner, version, agent, task_id="slow", seed=seed, limits={"max_steps": 5})
                                for seed in (0, 0, 1))
    assert first.initial_observation["__ndarray__"]["sha256"] == again.initial_observation["__ndarray__"]["sha256"]
    assert compare_trajectories(first, again) == {"identical": True, "first_divergence": None, "reason": ""}
    differs = compare_trajectories(first, other_seed)
    assert differs["identical"] is False and differs["first_divergence"] == 0, differs
    with Replayer(version) as replayer:
        replayed = replayer.replay(first)
    assert replayed.error == "" and replayed.diverged_at is None
