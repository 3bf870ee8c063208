"""Remote loops ask for a curriculum instead of a task: StudioEnv and StudioVectorEnv (REST sessions) and
OpenEnv's websocket reset get the sampler's pick for their agent, never an eval task, and their finished
episodes add to that agent's statistics."""
import json

import httpx
import pytest

from websockets.sync.client import connect

from runs.curriculum.models import TaskStat
from runs.models import Rollout
from runs.protocols.keys import openenv_base_path, openenv_key_get_or_create
from runs.sessions.services import REMOTE_AGENT_NAME
from studio import services as studio_services
from studio_client import StudioClient, StudioEnv, StudioError
from studio_client.gym import StudioVectorEnv
from tests.curriculum.test_task_stats_and_samplers import ENV_PY, TASKS
from tests.processes import asgi_server, episode_host, episode_host_prefix, wait_for  # noqa: F401 - fixtures
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


def test_a_remote_loop_that_names_its_agent_learns_under_that_name(client, version, owner_api):
    """`agent=` on StudioEnv and StudioVectorEnv: their episodes, session run and statistics are that agent's,
    and the curriculum draws from that agent's statistics (none yet: uniform), not from `remote`'s."""
    env = StudioEnv(client, "bands@1", curriculum="learnable", agent="policy-a")
    for seed in range(6):
        env.reset(seed=seed)
        env.step(3)
    env.close()
    vector = StudioVectorEnv(client, "bands@1", 2, agent="policy-a", task_ids=["coin"])
    vector.reset(seed=50)
    vector.step([3, 3])
    vector.close()
    mine = {stat.task_id: stat.rollouts for stat in TaskStat.objects.filter(environment_version=version, agent_name="policy-a")}
    assert sum(mine.values()) == 6 + 2 and "held-out" not in mine, mine
    remote = {stat.task_id: stat.rollouts for stat in TaskStat.objects.filter(environment_version=version, agent_name=REMOTE_AGENT_NAME)}
    assert remote == {"easy": 40, "never": 40, "coin": 40}  # untouched
    body = owner_api.get("/environments/bands/versions/1/tasks/stats", {"agent": "policy-a"}).json()
    assert sum(task["rollouts"] for task in body["tasks"]) == 8
    assert {run["agent"] for run in owner_api.get("/runs", {"purpose": "session"}).json()} == {"policy-a"}


@pytest.mark.parametrize("agent, says", [("bad name!", "letters, digits"), ("", "letters, digits"), ("x" * 121, "1 to 120"),
                                         ("random", "random agent")])
def test_a_bad_agent_name_is_a_400_naming_agent(client, version, team, owner, agent, says):
    from tests.runs.rollout_factories import random_agent

    random_agent(team, owner)
    with pytest.raises(StudioError) as refused:
        client.session("bands@1", "easy", 0, agent=agent)
    assert refused.value.status == 400 and refused.value.field == "agent" and says in refused.value.detail


def test_an_openenv_base_url_names_its_agent_in_its_query_and_a_reset_may_too(asgi_server, episode_host, team, owner, version):  # noqa: F811
    """openenv-core's client appends `/ws` to the base URL as given: `...?agent=policy-b` + `/ws` still works."""
    from openenv.core import GenericEnvClient

    key = openenv_key_get_or_create(team=team, actor=owner, version=version)
    base = asgi_server + openenv_base_path(version=version, key=key)
    with GenericEnvClient(base_url=base + "?agent=policy-b").sync() as env:
        first = env.reset(seed=0).observation["metadata"]["rollout_id"]
        env.step({"action": 3})
        second = env.reset(seed=1, agent="policy-c").observation["metadata"]["rollout_id"]
        env.step({"action": 3})
    wait_for(lambda: Rollout.objects.filter(pk__in=[first, second], status__in=["succeeded", "failed"]).count() == 2, 20,
             "both episodes to be verified")
    assert Rollout.objects.get(pk=first).run.agent.name == "policy-b"
    assert Rollout.objects.get(pk=second).run.agent.name == "policy-c"
    assert TaskStat.objects.filter(environment_version=version, agent_name="policy-b").get().rollouts == 1
    assert not TaskStat.objects.filter(environment_version=version, agent_name="openenv").exists()

    url = base.replace("http://", "ws://") + "/ws?agent=" + "no%20spaces"
    with connect(url) as ws:
        refused = json.loads(ws.recv())
    assert refused["type"] == "error" and "agent must be" in refused["data"]["message"]
    with connect(base.replace("http://", "ws://") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"agent": "bad/name"}}))
        refused = json.loads(ws.recv())
    assert refused["type"] == "error" and refused["data"]["errors"][0]["loc"] == ["data", "agent"]
    response = httpx.post(base + "/reset?agent=", json={})
    assert response.status_code == 400 and "agent must be" in response.json()["detail"]


def test_an_openenv_base_url_with_a_curriculum_gets_the_samplers_tasks(asgi_server, episode_host, team, owner, version):  # noqa: F811
    """`?agent=NAME&curriculum=learnable` on the base URL: every reset naming no task (websocket or HTTP)
    gets the sampler's pick from that agent's statistics; one naming a task keeps it."""
    from openenv.core import GenericEnvClient

    for task_id, successes in (("easy", 40), ("coin", 20), ("never", 0)):
        TaskStat.objects.create(team=team, environment_version=version, task_id=task_id, agent_name="policy-d",
                                rollouts=40, successes=successes, steps_sum=40)
    key = openenv_key_get_or_create(team=team, actor=owner, version=version)
    base = asgi_server + openenv_base_path(version=version, key=key)
    with GenericEnvClient(base_url=base + "?agent=policy-d&curriculum=learnable").sync() as env:
        tasks = [env.reset(seed=seed).observation["metadata"]["task_id"] for seed in range(6)]
        named = env.reset(seed=0, task_id="never").observation["metadata"]["task_id"]
    assert tasks.count("coin") >= 5 and named == "never", tasks
    reset = httpx.post(base + "/reset?agent=policy-d&curriculum=ladder", json={"seed": 3})
    assert reset.status_code == 200 and reset.json()["observation"]["metadata"]["task_id"] == "coin"
    refused = httpx.post(base + "?curriculum=greedy/reset", json={})
    assert refused.status_code == 400 and "curriculum must be one of" in refused.json()["detail"]


def test_sessions_never_get_a_held_out_task_unless_they_name_it(client, version, asgi_server, team, owner):
    """A seed picks among the training tasks (StudioEnv, OpenEnv); the held-out task is served only when named."""
    assert client.spaces("bands@1")["eval_task_ids"] == ["held-out"]
    env = StudioEnv(client, "bands@1")
    by_seed = [env.reset(seed=seed)[1]["task_id"] for seed in range(6)]
    named = env.reset(seed=0, options={"task_id": "held-out"})[1]["task_id"]
    env.close()
    assert "held-out" not in by_seed and set(by_seed) == {"easy", "coin", "never"} and named == "held-out"
    key = openenv_key_get_or_create(team=team, actor=owner, version=version)
    base = asgi_server + openenv_base_path(version=version, key=key)
    over_openenv = [httpx.post(base + "/reset", json={"seed": seed}).json()["observation"]["metadata"]["task_id"]
                    for seed in range(4)]
    assert "held-out" not in over_openenv, over_openenv
