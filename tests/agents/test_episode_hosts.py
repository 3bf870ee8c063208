"""Episode hosts: interactive episodes live in host processes, reached through Redis from any web
process; faults (a killed host, a hung reset, a team over its cap) end with a clear state and message."""
import os
import signal
import threading
import time

import httpx
import pytest
from django.db import connection

from runs.models import Rollout, RolloutStatus
from studio.models import Membership, Role, Team
from tests.conftest import api_for, make_user
from tests.processes import (  # noqa: F401 - fixtures
    asgi_server,
    episode_host,
    episode_host_prefix,
    kill_group,
    own_episode_host,
    start_asgi_server,
    wait_for,
)
from tests.runs.rollout_factories import package_version

pytestmark = pytest.mark.django_db(transaction=True)

COUNTER = """
    import time

    class Env:
        def reset(self, task, seed):
            time.sleep(task.get("reset_sleep", 0))
            self.n = 0
            return {"n": 0}

        def step(self, action):
            self.n += int(action)
            return {"n": self.n}, 1.0, self.n >= 1000, False, {}

        def verify(self):
            return (1.0 if self.n > 0 else 0.0), f"n={self.n}"
"""
TASKS = [{"id": "t1", "difficulty": 1}, {"id": "slow", "difficulty": 1, "reset_sleep": 4}]


@pytest.fixture
def counter(team, owner):
    return package_version(team, owner, "counter", COUNTER, tasks=TASKS, max_steps=500)


def open_session(api, task_id="t1", version="counter@1"):
    response = api.post("/sessions", {"version": version, "task_id": task_id, "seed": 0})
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.usefixtures("episode_host")
def test_a_session_started_through_one_web_process_is_stepped_and_closed_through_another(tmp_path, team, owner, counter):
    from studio import services as studio_services

    _, token = studio_services.token_create(team=team, actor=owner, name="two-fronts")
    headers = {"Authorization": f"Bearer {token}"}
    first, first_url = start_asgi_server(tmp_path / "web-1.log")
    second, second_url = start_asgi_server(tmp_path / "web-2.log")
    try:
        opened = httpx.post(f"{first_url}/api/v1/sessions", json={"version": "counter@1", "task_id": "t1"}, headers=headers,
                            timeout=30).json()
        sid = opened["session_id"]
        step = httpx.post(f"{second_url}/api/v1/sessions/{sid}/step", json={"action": 2}, headers=headers, timeout=30)
        assert step.status_code == 200 and step.json()["observation"] == {"n": 2}
        kill_group(first)  # a web process restarts: the session lives on in its host
        step = httpx.post(f"{second_url}/api/v1/sessions/{sid}/step", json={"action": 3}, headers=headers, timeout=30)
        assert step.json()["observation"] == {"n": 5} and step.json()["index"] == 1
        closed = httpx.post(f"{second_url}/api/v1/sessions/{sid}/close", headers=headers, timeout=30).json()
        assert closed["status"] == "succeeded" and closed["step_count"] == 2 and closed["verifier_reason"] == "n=5"
    finally:
        kill_group(first)
        kill_group(second)
    rollout = Rollout.objects.get(pk=opened["rollout_id"])
    assert list(rollout.steps.order_by("index").values_list("index", flat=True)) == [0, 1]


@pytest.mark.usefixtures("episode_host")
def test_batched_steps_reach_many_sessions_in_one_request(owner_api, outsider_api, counter):
    sessions = [open_session(owner_api)["session_id"] for _ in range(3)]
    response = owner_api.post("/sessions/step", {"steps": [{"session_id": sid, "action": i + 1} for i, sid in enumerate(sessions)]
                                                 + [{"session_id": "nope", "action": 1}]})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["observation"] for r in results[:3]] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert results[3]["ok"] is False and results[3]["status"] == 404
    # Another team's batch cannot reach them.
    foreign = outsider_api.post("/sessions/step", {"steps": [{"session_id": sessions[0], "action": 1}]}).json()["results"]
    assert foreign[0]["ok"] is False and foreign[0]["status"] == 404
    for sid in sessions:
        assert owner_api.post(f"/sessions/{sid}/close").json()["step_count"] == 1


def test_a_killed_host_ends_its_episodes_errored_and_the_client_is_told(owner_api, counter, own_episode_host):
    host = own_episode_host()
    opened = open_session(owner_api)
    sid = opened["session_id"]
    for _ in range(3):  # answered, and (most likely) not yet written by the host's 0.2 s batch
        assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 200
    os.killpg(host.pid, signal.SIGKILL)
    host.wait(timeout=10)
    started = time.monotonic()
    response = owner_api.post(f"/sessions/{sid}/step", {"action": 1})
    assert time.monotonic() - started < 10  # an error, not a hang
    assert response.status_code == 503 and "stopped" in response.json()["detail"]
    rollout = Rollout.objects.get(pk=opened["rollout_id"])
    assert rollout.status == RolloutStatus.ERRORED and "episode host" in rollout.error and rollout.end_reason == "infra_error"
    listed = owner_api.get(f"/runs/{rollout.run_id}/rollouts", {"end_reason": "infra_error"}).json()
    assert [r["id"] for r in listed] == [rollout.pk]
    # Every step the client was answered is stored, once: the dead host's journal is written first.
    assert list(rollout.steps.order_by("index").values_list("index", flat=True)) == [0, 1, 2]
    assert rollout.step_count == 3 and rollout.total_reward == 3.0


def test_without_a_host_starting_a_session_is_a_clear_503(owner_api, counter, settings):
    settings.EPISODE_HOST_PREFIX = "test-nobody-home"
    response = owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"})
    assert response.status_code == 503 and "No episode host is running" in response.json()["detail"]
    assert not Rollout.objects.filter(status=RolloutStatus.RUNNING).exists()


def test_a_team_cannot_hold_more_open_episodes_than_its_cap(owner_api, counter, own_episode_host, settings):
    own_episode_host()
    settings.EPISODES_MAX_OPEN_PER_TEAM = 2
    sessions = [open_session(owner_api)["session_id"] for _ in range(2)]
    refused = owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"})
    assert refused.status_code == 429 and "EPISODES_MAX_OPEN_PER_TEAM=2" in refused.json()["detail"]
    owner_api.post(f"/sessions/{sessions[0]}/close")
    assert owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"}).status_code == 201


def test_open_episodes_are_admitted_by_the_memory_their_versions_declare(owner_api, outsider_api, client, owner, counter, own_episode_host, settings):
    own_episode_host()
    settings.EPISODES_TEAM_MEMORY_MB = 1100  # two episodes of 512 MB (the sandbox default) fit, a third does not
    sessions = [open_session(owner_api)["session_id"] for _ in range(2)]
    refused = owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"})
    detail = refused.json()["detail"]
    assert refused.status_code == 429, refused.content
    assert "declare 1,024 MB" in detail and "olivia" in detail and "512 MB more" in detail and "EPISODES_TEAM_MEMORY_MB" in detail
    assert int(refused["Retry-After"]) > 0
    assert Rollout.objects.filter(status=RolloutStatus.RUNNING).count() == 2  # nothing half-opened
    listed = owner_api.get("/sessions").json()
    assert listed["memory_mb"] == 1024 and listed["budget_mb"] == 1100
    assert [(e["version"], e["memory_mb"], e["opened_by"], e["kind"]) for e in listed["episodes"]] == [("counter@1", 512, "olivia", "remote")] * 2
    assert outsider_api.get("/sessions").json()["episodes"] == []  # another team sees none of them
    client.force_login(owner)
    page = client.get("/t/alpha/episodes/").content.decode()
    assert "1024 MB" in page and "1100 MB" in page and page.count("counter@1") == 2
    owner_api.post(f"/sessions/{sessions[0]}/close")
    assert owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"}).status_code == 201


def test_a_host_refuses_episodes_over_its_memory_budget_and_the_refused_one_ends(owner_api, counter, own_episode_host):
    own_episode_host(EPISODE_HOST_MEMORY_MB=1100)
    open_session(owner_api)
    open_session(owner_api)
    refused = owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"})
    assert refused.status_code == 429 and "EPISODE_HOST_MEMORY_MB" in refused.json()["detail"], refused.content
    assert "holds 2 open episodes declaring 1,024 MB" in refused.json()["detail"]
    assert Rollout.objects.filter(status=RolloutStatus.RUNNING).count() == 2
    assert Rollout.objects.get(status=RolloutStatus.CANCELLED).end_reason == "refused"


def test_a_team_over_its_storage_quota_opens_and_steps_no_episodes_but_may_close_them(owner_api, counter, own_episode_host, settings):
    import secrets

    own_episode_host()
    sid = open_session(owner_api)["session_id"]  # opened under the quota (its steps' check is fresh after it)
    revision = owner_api.get("/environments/counter/draft").json()["revision"]
    noise = secrets.token_hex(950_000)
    assert owner_api.put("/environments/counter/draft/files/data.txt", {"content": noise, "revision": revision}).status_code == 200
    settings.TEAM_STORAGE_QUOTA_MB = 1
    refused = owner_api.post("/sessions", {"version": "counter@1", "task_id": "t1"})
    assert refused.status_code == 413 and "New episode refused" in refused.json()["detail"], refused.content
    step = owner_api.post(f"/sessions/{sid}/step", {"action": 1})
    assert step.status_code == 413 and "Storing another step" in step.json()["detail"], step.content
    batch = owner_api.post("/sessions/step", {"steps": [{"session_id": sid, "action": 1}]})
    assert batch.status_code == 413, batch.content
    closed = owner_api.post(f"/sessions/{sid}/close")
    assert closed.status_code == 200 and closed.json()["step_count"] == 0, closed.content


def test_a_hung_reset_ends_the_session_timed_out(owner_api, team, owner, own_episode_host):
    own_episode_host()
    package_version(team, owner, "hangs", COUNTER, tasks=[{"id": "t1", "reset_sleep": 60}], limits={"step_timeout_s": 1})
    response = owner_api.post("/sessions", {"version": "hangs@1", "task_id": "t1"})
    assert response.status_code == 409 and "did not answer within 1.0 s" in response.json()["detail"]
    rollout = Rollout.objects.get(run__environment_version__environment__slug="hangs")
    assert rollout.status == RolloutStatus.TIMED_OUT


def test_one_teams_slow_reset_does_not_delay_another_teams_steps(owner_api, team, owner, counter, own_episode_host):
    own_episode_host()
    other = Team.objects.create(slug="charlie", name="Charlie")
    other_owner = make_user("carol")
    Membership.objects.create(team=other, user=other_owner, role=Role.OWNER)
    package_version(other, other_owner, "counter", COUNTER, tasks=TASKS)
    other_api = api_for(other_owner, other)
    sid = open_session(owner_api)["session_id"]

    def open_slow():
        try:
            other_api.post("/sessions", {"version": "counter@1", "task_id": "slow"})
        finally:
            connection.close()

    slow = [threading.Thread(target=open_slow) for _ in range(6)]
    for thread in slow:
        thread.start()
    time.sleep(0.5)  # the slow resets are under way
    latencies = []
    for _ in range(10):
        started = time.monotonic()
        assert owner_api.post(f"/sessions/{sid}/step", {"action": 1}).status_code == 200
        latencies.append(time.monotonic() - started)
    for thread in slow:
        thread.join(timeout=30)
    assert max(latencies) < 1.0, latencies


@pytest.mark.usefixtures("episode_host")
def test_the_step_routes_over_http_answer_like_the_documented_api(asgi_server, team, owner, outsider, other_team, counter):
    from studio import services as studio_services

    _, token = studio_services.token_create(team=team, actor=owner, name="http")
    _, foreign = studio_services.token_create(team=other_team, actor=outsider, name="foreign")
    http = httpx.Client(base_url=f"{asgi_server}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    sid = http.post("/sessions", json={"version": "counter@1", "task_id": "t1"}).json()["session_id"]
    step = http.post(f"/sessions/{sid}/step", json={"action": 4})
    assert step.status_code == 200
    assert step.json() == {"index": 0, "observation": {"n": 4}, "reward": 1.0, "terminated": False, "truncated": False, "info": {}}
    assert http.post(f"/sessions/{sid}/step", json={"action": 1}, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert http.post(f"/sessions/{sid}/step", json={"action": 1},
                     headers={"Authorization": f"Bearer {foreign}"}).json()["detail"].startswith("No open episode")
    assert http.post("/sessions/unknown/step", json={"action": 1}).status_code == 404
    bad = http.post(f"/sessions/{sid}/step", content=b"{not json")
    assert bad.status_code == 400 and "not JSON" in bad.json()["detail"]
    crash = http.post(f"/sessions/{sid}/step", json={"action": "x"})  # int("x") raises in env.py
    assert crash.status_code == 409 and "ValueError" in crash.json()["detail"]
    assert http.post("/sessions/step", json={"steps": []}).status_code == 422
    http.close()


@pytest.mark.usefixtures("episode_host")
def test_sessions_of_a_version_declaring_concurrent_sessions_share_one_sandbox_process(owner_api, team, owner):
    from environments import services as env_services

    files = {"environment.toml": 'name = "shared"\nkind = "python"\nentrypoint = "env:Env"\nconcurrent_sessions = 8\n',
             "env.py": __import__("textwrap").dedent(COUNTER), "tasks.jsonl": '{"id": "t1"}\n'}
    env = env_services.environment_create(team=team, actor=owner, name="shared", slug="shared", files=files)
    env_services.version_commit(environment=env, actor=owner, message="shared", files=files)
    first, second = (open_session(owner_api, version="shared@1")["session_id"] for _ in range(2))
    assert owner_api.post(f"/sessions/{first}/step", {"action": 5}).json()["observation"] == {"n": 5}
    assert owner_api.post(f"/sessions/{second}/step", {"action": 2}).json()["observation"] == {"n": 2}
    crashed = owner_api.post(f"/sessions/{second}/step", {"action": "x"})  # its own error, not the other's
    assert crashed.status_code == 409
    assert owner_api.post(f"/sessions/{first}/step", {"action": 1}).json()["observation"] == {"n": 6}
    closed = owner_api.post(f"/sessions/{first}/close").json()
    assert closed["status"] == "succeeded"
    facts = [Rollout.objects.get(pk=closed["rollout_id"]).reproduction["sandbox"],
             Rollout.objects.filter(status=RolloutStatus.ERRORED).get().reproduction["sandbox"]]
    assert all(f["shared"] is True and f["capacity"] == 8 for f in facts)
