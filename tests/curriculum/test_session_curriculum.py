"""Remote loops ask for a curriculum instead of a task: StudioEnv and StudioVectorEnv (REST sessions) and
OpenEnv's websocket reset get the sampler's pick for their agent, never an eval task, and their finished
episodes add to that agent's statistics."""
import json

import pytest

from websockets.sync.client import connect

from runs.curriculum.models import TaskStat
from runs.protocols.keys import openenv_base_path, openenv_key_get_or_create
from runs.sessions.services import REMOTE_AGENT_NAME
from studio import services as studio_services
from studio_client import StudioClient, StudioEnv, StudioError
from studio_client.gym import StudioVectorEnv
from tests.curriculum.test_task_stats_and_samplers import ENV_PY, TASKS
from tests.processes import asgi_server, episode_host, episode_host_prefix  # noqa: F401 - fixtures
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def version(team, owner):
    version = package_version(team, owner, "bands", ENV_PY, tasks=TASKS)
    # What the remote agent's earlier episodes taught: easy always passes, never never does, coin half the time.
    for task_id, rollouts, successes in (("easy", 40, 40), ("never", 40, 0), ("coin", 40, 20)):
        TaskStat.objects.create(team=team, environment_version=version, task_id=task_id, agent_name=REMOTE_AGENT_NAME,
                                rollouts=rollouts, successes=successes, steps_sum=rollouts)
    return version


@pytest.fixture
def client(episode_host, asgi_server, owner, team):  # noqa: F811 - the host first: the server reaches it
    _, raw = studio_services.token_create(team=team, actor=owner, name="loop")
    with StudioClient(asgi_server, raw) as studio:
        yield studio


def test_studio_env_and_vector_env_take_their_tasks_from_the_curriculum(client, version):
    env = StudioEnv(client, "bands@1", curriculum="learnable")
    picked = []
    for seed in range(8):
        _, info = env.reset(seed=seed)
        picked.append(info["task_id"])
        env.step(3)
    env.close()
    assert set(picked) <= {"easy", "coin", "never"} and picked.count("coin") >= 6, picked
    coin = TaskStat.objects.get(environment_version=version, agent_name=REMOTE_AGENT_NAME, task_id="coin")
    assert coin.rollouts == 40 + picked.count("coin")  # each finished episode added itself

    vector = StudioVectorEnv(client, "bands@1", 4, curriculum="ladder")
    _, infos = vector.reset(seed=100)
    vector.close()
    assert list(infos["task_id"]) == ["coin"] * 4  # level 1 (easy) is passed: the ladder serves level 2


def test_a_bad_curriculum_is_refused_by_name(client, version):
    with pytest.raises(StudioError) as refused:
        client.session("bands@1", None, 0, curriculum="greedy")
    assert refused.value.status in (400, 422) and "curriculum" in str(refused.value)


def test_an_openenv_websocket_reset_takes_the_curriculum_keyword(asgi_server, episode_host, team, owner, version):  # noqa: F811
    key = openenv_key_get_or_create(team=team, actor=owner, version=version)
    url = asgi_server.replace("http://", "ws://") + openenv_base_path(version=version, key=key) + "/ws"
    TaskStat.objects.create(team=team, environment_version=version, task_id="coin", agent_name="openenv",
                            rollouts=40, successes=20, steps_sum=40)
    TaskStat.objects.create(team=team, environment_version=version, task_id="easy", agent_name="openenv",
                            rollouts=40, successes=40, steps_sum=40)
    TaskStat.objects.create(team=team, environment_version=version, task_id="never", agent_name="openenv",
                            rollouts=40, successes=0, steps_sum=40)
    with connect(url) as ws:
        tasks = []
        for seed in range(5):
            ws.send(json.dumps({"type": "reset", "data": {"seed": seed, "curriculum": "learnable"}}))
            reply = json.loads(ws.recv())
            tasks.append(reply["data"]["observation"]["metadata"]["task_id"])
        ws.send(json.dumps({"type": "reset", "data": {"curriculum": "greedy"}}))
        refused = json.loads(ws.recv())
    assert tasks.count("coin") >= 4, tasks
    assert refused["type"] == "error" and "curriculum" in json.dumps(refused)
