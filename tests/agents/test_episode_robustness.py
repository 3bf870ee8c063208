"""Episode hosts under faults of the machinery around them: Redis unreachable, a host that misses a
presence renewal, a database that refuses a batch of steps, bad JSON on the step route, an agent that
cannot start."""
import os
import signal
import threading
import time

import httpx
import psycopg
import pytest
from django.db import connection

from runs.episodes import routing
from runs.models import Agent, Rollout, RolloutStatus
from tests.agents.test_episode_hosts import COUNTER, TASKS, open_session
from tests.processes import (  # noqa: F401 - fixtures
    asgi_server,
    database_url,
    episode_host,
    episode_host_prefix,
    free_port,
    own_episode_host,
)
from tests.runs.rollout_factories import package_version, random_agent
from runs import services as run_services
from runs.tasks import execute_rollout

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counter(team, owner):
    return package_version(team, owner, "counter", COUNTER, tasks=TASKS, max_steps=500)


def host_id_of(proc) -> str:
    return next(h for h in routing.live_hosts() if h.split("-")[-2] == str(proc.pid))


def test_an_unreachable_redis_is_a_503_naming_redis_and_leaves_nothing_running(owner_api, counter, settings):
    settings.EPISODE_HOST_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    response = owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"})
    assert time.monotonic() - started < 10
    assert response.status_code == 503 and "Redis" in response.json()["detail"], response.content
    assert not Rollout.objects.filter(status=RolloutStatus.RUNNING).exists()
    step = owner_api.post("/sessions/some-session/step", {"action": 1})
    assert step.status_code == 503 and "Redis" in step.json()["detail"]


def test_a_host_that_misses_its_presence_renewal_briefly_keeps_its_sessions(owner_api, counter, own_episode_host):
    host = own_episode_host()
    sid = open_session(owner_api)["session_id"]
    assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 200
    # The host stalls (as under heavy load) and its presence lapses; it comes back 1.2 s later.
    host_id = host_id_of(host)
    os.kill(host.pid, signal.SIGSTOP)
    try:
        routing.client().delete(routing.host_alive_key(host_id))
        answers = []
        stepper = threading.Thread(target=lambda: answers.append(owner_api.post(f"/sessions/{sid}/step", {"action": 1})))
        stepper.start()
        time.sleep(1.2)
    finally:
        os.kill(host.pid, signal.SIGCONT)
    stepper.join(timeout=30)
    connection.close()
    assert answers[0].status_code == 200, answers[0].content
    assert answers[0].json()["observation"] == {"n": 2}
    closed = owner_api.post(f"/sessions/{sid}/close").json()
    assert closed["status"] == "succeeded" and closed["step_count"] == 2


def test_a_start_waits_briefly_for_a_host_to_appear(owner_api, counter, own_episode_host):
    host = own_episode_host()
    host_id = host_id_of(host)
    os.kill(host.pid, signal.SIGSTOP)  # as if the studio's only host were (re)starting
    try:
        client = routing.client()
        client.delete(routing.host_alive_key(host_id))
        client.zrem(routing.hosts_key(), host_id)
        answers = []
        opener = threading.Thread(target=lambda: answers.append(
            owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"})))
        opener.start()
        time.sleep(1.0)
    finally:
        os.kill(host.pid, signal.SIGCONT)
    opener.join(timeout=60)
    connection.close()
    assert answers[0].status_code == 201, answers[0].content


def test_steps_of_a_batch_the_database_refused_are_written_later_once(team, owner, counter, settings):
    from runs.episodes.host import EpisodeHost
    from runs.episodes.writer import FLUSH_EVERY_S

    settings.EPISODE_HOST_PREFIX = f"test-robust-{os.getpid()}"
    host = EpisodeHost(threads=2, start_threads=1, pool_size=0)
    try:
        opened = _start_in_process(host, team=team, owner=owner, version=counter)
        held = host.held[opened["episode_id"]]
        for action in (1, 2, 3):
            host.step(held, action)
        time.sleep(FLUSH_EVERY_S + 0.05)  # the batch is due whatever the machine's speed
        with psycopg.connect(database_url(), autocommit=False) as locker:
            locker.execute(f"LOCK TABLE {Rollout.steps.rel.related_model._meta.db_table} IN ACCESS EXCLUSIVE MODE")
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SET statement_timeout = 300")
                with pytest.raises(Exception, match="statement timeout"):
                    host.reap_once(now=time.monotonic() + 0.5)
            finally:
                locker.rollback()
                with connection.cursor() as cursor:
                    cursor.execute("SET statement_timeout = 0")
        assert len(held.episode.writer.pending) == 3  # given back, not dropped
        host.step(held, 4)
        time.sleep(FLUSH_EVERY_S + 0.05)
        host.reap_once(now=time.monotonic() + 0.5)
        rollout = Rollout.objects.get(pk=opened["rollout_id"])
        assert list(rollout.steps.order_by("index").values_list("index", flat=True)) == [0, 1, 2, 3]
        assert rollout.step_count == 4 and rollout.total_reward == 4.0
        host.close(held)
    finally:
        host.shutdown()


def _start_in_process(host, *, team, owner, version):
    from runs.models import Run, RunStatus
    from django.utils import timezone

    agent = run_services.agent_get_or_create(team=team, actor=owner, name="remote", kind="remote")
    run = Run.objects.create(team=team, environment_version=version, agent=agent, task_ids=["t1"], seeds=[0], limits={},
                             status=RunStatus.RUNNING, created_by=owner)
    rollout = Rollout.objects.create(team=team, run=run, task_id="t1", seed=0, status=RolloutStatus.RUNNING, attempts=1,
                                     started_at=timezone.now(), heartbeat_at=timezone.now())
    return {**host.start({"episode": "ep-robust", "team": team.pk, "rollout": rollout.pk, "driver": "session"}),
            "rollout_id": rollout.pk}


def test_an_agent_that_cannot_run_in_a_worker_ends_its_rollout_errored_with_the_reason(team, owner, counter):
    agent = random_agent(team, owner)
    run = run_services.run_create(team=team, actor=owner, version=counter, agent=agent, task_ids=["t1"], seeds=[0])
    Agent.objects.filter(pk=agent.pk).update(kind="human")  # changed under a queued run
    rollout_id = run.rollouts.get().pk
    execute_rollout(rollout_id)
    rollout = Rollout.objects.get(pk=rollout_id)
    assert rollout.status == RolloutStatus.ERRORED
    assert "cannot run in this worker" in rollout.error and "internal error" not in rollout.error


@pytest.mark.usefixtures("episode_host")
@pytest.mark.parametrize("body, problem", [
    (b'{"action": NaN}', "NaN"),
    (b'{"action": [1, Infinity]}', "Infinity"),
    (b'{"action": "a\\u0000b"}', "NUL"),
    (b'{"action": "\\ud800"}', "surrogate"),
    (b'{"action": ' + b"[" * 200 + b"]" * 200 + b"}", "more than 64 levels"),
    (b'{"action": ' + b"[" * 5000 + b"]" * 5000 + b"}", "more than 64 levels"),
    (b'{"action": "\xff"}', "not JSON"),
])
def test_the_step_route_refuses_json_the_studio_cannot_keep(asgi_server, team, owner, counter, body, problem):
    from studio import services as studio_services

    _, token = studio_services.token_create(team=team, actor=owner, name="strict")
    http = httpx.Client(base_url=f"{asgi_server}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    sid = http.post("/sessions", json={"version": "counter@1", "task_id": "t1"}).json()["session_id"]
    refused = http.post(f"/sessions/{sid}/step", content=body, headers={"content-type": "application/json"})
    assert refused.status_code == 400 and problem in refused.json()["detail"], refused.content
    batch = b'{"steps": [{"session_id": "' + sid.encode() + b'", "action": ' + body[len(b'{"action": '):-1] + b"}]}"
    assert http.post("/sessions/step", content=batch).status_code == 400
    # The session is untouched: the next good step is its first.
    assert http.post(f"/sessions/{sid}/step", json={"action": 1}).json()["index"] == 0
    http.close()
