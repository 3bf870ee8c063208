"""The direct data plane (runs/episodes/direct.py): a routed episode's steps travel over one TCP
connection from the web process to its host, not through Redis lists; a host that dies mid-step ends
its episode once with the infrastructure reason; a host bound to another address is reached; a host
that announces no address is still reached through Redis; the port answers nobody without the
host's token."""
import os
import signal
import socket
import threading
import time
import uuid

import httpx
import pytest
import redis
from django.conf import settings

from runs.episodes import direct, routing
from runs.models import Rollout, RolloutStatus
from tests.processes import kill_group, own_episode_host, start_asgi_server  # noqa: F401 - fixture
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)

COUNTER = """
    import time

    class Env:
        def reset(self, task, seed):
            self.n = 0
            return {"n": 0}

        def step(self, action):
            time.sleep(3 if action == 99 else 0)
            self.n += int(action)
            return {"n": self.n}, 1.0, False, False, {}

        def verify(self):
            return (1.0 if self.n > 0 else 0.0), f"n={self.n}"
"""


@pytest.fixture
def counter(team, owner):
    return package_version(team, owner, "counter", COUNTER, tasks=[{"id": "t1", "difficulty": 1}], max_steps=500)


def open_session(api):
    response = api.post("/sessions", {"version": "counter@1", "task_id": "t1", "seed": 0})
    assert response.status_code == 201, response.content
    return response.json()


class Monitor:
    """Every command Redis runs while it is on (Redis MONITOR), for the names of this test's hosts."""

    def __init__(self):
        self.commands: list[str] = []
        self.client = redis.Redis.from_url(settings.EPISODE_HOST_REDIS_URL)
        self.end_mark = f"monitor-end-{uuid.uuid4().hex}"
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        with self.client.monitor() as monitor:
            self.ready.set()
            for command in monitor.listen():
                if self.end_mark in command["command"]:
                    return  # MONITOR lists commands in the order Redis ran them: every earlier one is in
                if settings.EPISODE_HOST_PREFIX in command["command"]:
                    self.commands.append(command["command"])

    def __enter__(self):
        self.thread.start()
        self.ready.wait(5)
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.client.echo(self.end_mark)  # the last command the monitor reads
        self.thread.join(timeout=5)

    def lists_of_requests(self) -> list[str]:
        """Requests pushed onto a host's list, and any command on a reply list: the Redis path of a step.
        A host's own wait on its list (a blocking pop that times out each second, then a pop of what
        came meanwhile) runs whether or not a step is sent, so it is not counted."""
        def on_the_path(command: str) -> bool:
            verb = command.split(" ", 1)[0].upper()
            return ":eh:reply:" in command or (":eh:host:" in command and verb not in ("BLPOP", "LPOP"))

        return [c for c in self.commands if on_the_path(c)]


@pytest.fixture
def web(tmp_path, team, owner):
    """web() -> an httpx client of a uvicorn web process (its step routes: the async path, on its event
    loop), started once this test's host is (it takes the test's Redis names)."""
    from studio import services as studio_services

    started = []

    def start():
        _, token = studio_services.token_create(team=team, actor=owner, name="direct")
        proc, url = start_asgi_server(tmp_path / "web.log")
        http = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        started.append((proc, http))
        return http

    yield start
    for proc, http in started:
        http.close()
        kill_group(proc)


def _announced(host_proc) -> tuple[str, str]:
    """(host id, address) a host announced ("" for none)."""
    r = routing.client()
    for member in r.zrange(routing.hosts_key(), 0, -1):
        host_id = member.decode()
        if host_id.split("-")[-2] == str(host_proc.pid):
            raw = r.get(routing.host_address_key(host_id))
            return host_id, direct.parse_announced(raw.decode())[0] if raw else ""
    raise AssertionError("the host is not announced")


def test_steps_travel_over_the_direct_connection_not_redis_lists_and_are_all_recorded(owner_api, counter, web,
                                                                                     own_episode_host):
    host = own_episode_host()
    http = web()
    host_id, address = _announced(host)
    assert address.startswith("127.0.0.1:")
    sid = open_session(owner_api)["session_id"]
    with Monitor() as monitor:
        for _ in range(10):  # the sync client (Django views)
            assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 200

        # The async client: the ASGI fast path of a web process (as OpenEnv's websocket steps).
        stepped = [http.post(f"/sessions/{sid}/step", json={"action": 1}).json() for _ in range(10)]
    assert [step["observation"]["n"] for step in stepped] == list(range(11, 21))
    assert monitor.lists_of_requests() == []
    # The host still journals each answered step (its recording is unchanged).
    assert sum(1 for c in monitor.commands if c.startswith("RPUSH ") and ":journal:" in c) == 20
    closed = owner_api.post(f"/sessions/{sid}/close").json()
    assert closed["step_count"] == 20
    rollout = Rollout.objects.get(pk=closed["rollout_id"])
    assert list(rollout.steps.order_by("index").values_list("index", flat=True)) == list(range(20))


def test_a_host_killed_during_a_step_ends_the_episode_once_with_the_infra_reason(owner_api, counter, own_episode_host):
    host = own_episode_host()
    opened = open_session(owner_api)
    sid = opened["session_id"]
    assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 200
    answers = []
    stepping = threading.Thread(target=lambda: answers.append(owner_api.post(f"/sessions/{sid}/step", {"action": 99})))
    stepping.start()
    time.sleep(1.0)  # the step is on the host, its sandbox sleeping
    started = time.monotonic()
    os.killpg(host.pid, signal.SIGKILL)
    stepping.join(timeout=20)
    # The dropped connection tells at once: a lost host's presence would take 4-5 s to lapse (HOST_TTL_S
    # after its last renewal, then HOST_GRACE_S), and the sandbox sleeps 3 s.
    assert time.monotonic() - started < 3.0
    response = answers[0]
    assert response.status_code == 503 and "stopped" in response.json()["detail"], response.content
    rollout = Rollout.objects.get(pk=opened["rollout_id"])
    assert rollout.status == RolloutStatus.ERRORED and rollout.end_reason == "infra_error"
    assert "episode host" in rollout.error and rollout.total_reward == 1.0  # never a reward of 0 for a lost host
    finished_at = rollout.finished_at
    again = owner_api.post(f"/sessions/{sid}/step", {"action": 1})
    assert again.status_code in (404, 503)
    rollout.refresh_from_db()
    assert rollout.finished_at == finished_at and rollout.status == RolloutStatus.ERRORED  # ended once


def test_a_host_bound_to_another_address_is_reached_there(owner_api, counter, own_episode_host):
    host = own_episode_host(EPISODE_HOST_BIND="127.0.0.2")
    _, address = _announced(host)
    assert address.startswith("127.0.0.2:")
    sid = open_session(owner_api)["session_id"]
    with Monitor() as monitor:
        assert owner_api.post(f"/sessions/{sid}/step", {"action": 2}).json()["observation"] == {"n": 2}
    assert monitor.lists_of_requests() == []
    assert owner_api.post(f"/sessions/{sid}/close").json()["step_count"] == 1


def test_a_host_announcing_no_address_is_reached_through_redis(owner_api, counter, own_episode_host):
    host = own_episode_host(EPISODE_HOST_DIRECT="false")
    assert _announced(host)[1] == ""
    sid = open_session(owner_api)["session_id"]
    with Monitor() as monitor:
        assert owner_api.post(f"/sessions/{sid}/step", {"action": 3}).json()["observation"] == {"n": 3}
    assert monitor.lists_of_requests()  # the Redis path, as before
    assert owner_api.post(f"/sessions/{sid}/close").json()["step_count"] == 1


def test_the_direct_port_answers_nobody_without_the_hosts_token(owner_api, team, counter, own_episode_host):
    host = own_episode_host()
    host_id, address = _announced(host)
    sid = open_session(owner_api)["session_id"]
    with socket.create_connection(direct.split_address(address), timeout=5) as sock:
        sock.sendall(direct.encode({"token": "0" * 32}))
        sock.sendall(direct.encode({"id": 1, "op": "step", "episode": sid, "team": team.pk, "action": 1}))
        assert sock.recv(1024) == b""  # closed without an answer
    assert owner_api.post(f"/sessions/{sid}/close").json()["step_count"] == 0


def test_a_host_killed_during_an_awaited_step_fails_it_at_once_and_ends_the_episode_once(owner_api, counter, web,
                                                                                        own_episode_host):
    host = own_episode_host()
    http = web()
    opened = open_session(owner_api)
    sid = opened["session_id"]
    assert http.post(f"/sessions/{sid}/step", json={"action": 1}).status_code == 200
    killed_at = []

    def kill():
        killed_at.append(time.monotonic())
        os.killpg(host.pid, signal.SIGKILL)

    threading.Timer(1.0, kill).start()
    lost = http.post(f"/sessions/{sid}/step", json={"action": 99})  # its sandbox sleeps 3 s
    # The connection's end tells at once, counted from the kill (a loaded machine may start the timer
    # late): a lost host's presence would take 4-5 s to lapse, and the sandbox sleeps 3 s.
    assert killed_at and time.monotonic() - killed_at[0] < 3.0
    assert lost.status_code == 503 and "stopped" in lost.json()["detail"], lost.content
    rollout = Rollout.objects.get(pk=opened["rollout_id"])
    assert rollout.status == RolloutStatus.ERRORED and rollout.end_reason == "infra_error"
    assert rollout.error == lost.json()["detail"]
    assert rollout.step_count == 1 and rollout.total_reward == 1.0
