"""Two hosts' worth of studio in network namespaces of their own: each runs a web process, a Celery
worker and an episode host, reaches PostgreSQL, Redis and the S3-compatible artifact store over a veth
address (not loopback), under a hostname of its own, with no folder in common. A run's rollouts are
executed by the workers of both; a session started through one web process is stepped and closed
through the other; a human play is started, played, shown (its screenshots) and finished through both."""
import re
import shutil
import tempfile
import uuid
from pathlib import Path

import boto3
import httpx
import pytest
from django.test import Client
from moto.server import ThreadedMotoServer

from runs.models import AgentKind, Rollout, RolloutStatus
from tests.agents.test_episode_hosts import COUNTER, TASKS
from tests.agents.test_redis_restart import SLOW_COUNT
from tests.browser_envs.conftest import browser_version
from tests.processes import (
    RedisServer,
    TcpForwarder,
    database_url,
    kill_group,
    network_namespaces_or_skip,
    start_asgi_server,
    start_celery_worker,
    start_episode_host,
    wait_for,
)
from tests.runs.rollout_factories import DEMO_DIR, package_version, read_folder

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

S3_KEYS = {"S3_ACCESS_KEY_ID": "studio-test", "S3_SECRET_ACCESS_KEY": "studio-test-secret", "S3_REGION": "us-east-1"}


@pytest.fixture
def two_hosts(tmp_path):
    """Two network namespaces, the servers they share (PostgreSQL, a private Redis, an S3 server)
    forwarded to each one's veth address; yields a function that starts a host's processes."""
    namespaces = network_namespaces_or_skip(2)
    forwarder, processes, redis_server, s3, scratches = TcpForwarder(), [], None, None, []
    try:
        (tmp_path / "redis").mkdir()
        redis_server = RedisServer(tmp_path / "redis")
        redis_server.start()
        s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        s3.start()
        s3_port = s3.get_host_and_port()[1]
        bucket = f"artifacts-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3_port}", region_name=S3_KEYS["S3_REGION"],
                     aws_access_key_id=S3_KEYS["S3_ACCESS_KEY_ID"],
                     aws_secret_access_key=S3_KEYS["S3_SECRET_ACCESS_KEY"]).create_bucket(Bucket=bucket)
        db = database_url()
        db_port = int(re.search(r":(\d+)/", db).group(1))
        for namespace in namespaces:
            forwarder.forward((namespace.outside, db_port), ("127.0.0.1", db_port))
            forwarder.forward((namespace.outside, redis_server.port), ("127.0.0.1", redis_server.port))
            forwarder.forward((namespace.outside, s3_port), ("127.0.0.1", s3_port))
        prefix, queue = f"test-mh-{uuid.uuid4().hex[:8]}", f"test-mh-{uuid.uuid4().hex[:8]}"
        allowed = ",".join(namespace.inside for namespace in namespaces)

        def start(index: int) -> dict:
            namespace, letter = namespaces[index], "ab"[index]
            hostname = f"studio-{letter}-{namespace.subnet}"
            folder = tmp_path / f"host-{letter}"
            (folder / "media").mkdir(parents=True)
            # Sandboxes run as an unprivileged user: their root must be reachable by it (pytest's is not).
            scratch = Path(tempfile.mkdtemp(prefix=f"studio-mh-{letter}-"))
            scratch.chmod(0o755)
            scratches.append(scratch)
            redis_url = f"redis://{namespace.outside}:{redis_server.port}/0"
            env = {
                "DATABASE_URL": db.replace("127.0.0.1", namespace.outside).replace("localhost", namespace.outside),
                "REDIS_URL": redis_url, "CELERY_BROKER_URL": redis_url, "EPISODE_HOST_REDIS_URL": redis_url,
                "EPISODE_HOST_PREFIX": prefix, "CHANNEL_LAYER_PREFIX": prefix, "CELERY_QUEUE": queue,
                "TEAM_MAX_RUNNING_ROLLOUTS": "0",  # one team's run spreads over both hosts' workers
                "MEDIA_ROOT": str(folder / "media"), "TMPDIR": str(scratch), "ALLOWED_HOSTS": allowed,
                "ARTIFACT_STORAGE": "s3", "S3_BUCKET": bucket, "S3_ENDPOINT_URL": f"http://{namespace.outside}:{s3_port}",
                **S3_KEYS,
                # `ip netns exec` mounts a fresh /sys without the cgroup hierarchy: this test is about hosts,
                # not sandbox layers (tests/runs/test_sandbox_escape.py covers those).
                "SANDBOX_ALLOW_WEAK": "true",
            }
            wrap = namespace.wrap(hostname)
            host = start_episode_host(folder / "host.log", prefix=prefix, db_url=env["DATABASE_URL"], env=env, wrap=wrap)
            processes.append(host)
            worker = start_celery_worker(folder / "worker.log", queue=queue, env=env, prefix=wrap, name=f"{queue}-{letter}",
                                         loglevel="info")
            processes.append(worker)
            web, url = start_asgi_server(folder / "web.log", env=env, prefix=wrap, host=namespace.inside)
            processes.append(web)
            return {"url": url, "hostname": hostname, "worker_log": folder / "worker.log", "media": folder / "media"}

        yield start
    finally:
        for proc in processes:
            kill_group(proc)
        for namespace in namespaces:
            namespace.delete()
        forwarder.close()
        if redis_server is not None:
            redis_server.kill()
        if s3 is not None:
            s3.stop()
        for scratch in scratches:
            shutil.rmtree(scratch, ignore_errors=True)


def test_two_hosts_in_their_own_network_namespaces_serve_one_studio(two_hosts, team, owner):
    from studio import services as studio_services

    package_version(team, owner, "counter", COUNTER, tasks=TASKS, max_steps=500)
    package_version(team, owner, "slow-count", SLOW_COUNT, max_steps=60)
    form = browser_version(team, owner, "web_form", read_folder(DEMO_DIR / "web_form"))
    a, b = two_hosts(0), two_hosts(1)
    _, token = studio_services.token_create(team=team, actor=owner, name="multihost")
    bearer = {"Authorization": f"Bearer {token}"}
    api_a = httpx.Client(base_url=f"{a['url']}/api/v1", headers=bearer, timeout=60)
    api_b = httpx.Client(base_url=f"{b['url']}/api/v1", headers=bearer, timeout=60)

    # Both workers listen before the run is queued, so each takes a share.
    wait_for(lambda: all(f"@{host['hostname']} ready." in host["worker_log"].read_text() for host in (a, b)), 90,
             "both workers to be ready")

    # 1. A run created through A's web is executed by the workers of both hosts.
    run = api_a.post("/runs", json={"version": "slow-count@1", "agent": "random", "seeds": "0-7"})
    assert run.status_code == 201, run.content
    run_id = run.json()["id"]
    wait_for(lambda: not Rollout.objects.filter(run_id=run_id).exclude(
        status__in=[RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.ERRORED]).exists(), 180,
        "the run's rollouts to end")
    rollouts = list(Rollout.objects.filter(run_id=run_id))
    assert [r.status for r in rollouts] == [RolloutStatus.SUCCEEDED] * 8, [(r.status, r.error) for r in rollouts]
    assert {r.worker.split(":")[0] for r in rollouts} == {a["hostname"], b["hostname"]}
    assert all(r.steps.count() == r.step_count == 60 for r in rollouts)
    assert api_b.get(f"/runs/{run_id}").json()["status"] == "finished"

    # 2. A remote session started through A's web is stepped and closed through B's (and A's).
    opened = api_a.post("/sessions", json={"version": "counter@1", "task_id": "t1"})
    assert opened.status_code == 201, opened.content
    sid = opened.json()["session_id"]
    assert api_b.post(f"/sessions/{sid}/step", json={"action": 2}).json()["observation"] == {"n": 2}
    assert api_a.post(f"/sessions/{sid}/step", json={"action": 3}).json()["observation"] == {"n": 5}
    assert api_b.post("/sessions/step", json={"steps": [{"session_id": sid, "action": 1}]}).json()["results"][0]["index"] == 2
    closed = api_b.post(f"/sessions/{sid}/close").json()
    assert (closed["status"], closed["step_count"], closed["verifier_reason"]) == ("succeeded", 3, "n=6")
    holder = Rollout.objects.get(pk=opened.json()["rollout_id"]).worker
    assert holder.startswith(("episode-host:" + a["hostname"], "episode-host:" + b["hostname"]))

    # 3. A human play: started through A's page, played and shown through B's, finished through A's.
    session = Client()
    session.force_login(owner)
    cookies = {"sessionid": session.cookies["sessionid"].value}
    web_a = httpx.Client(base_url=a["url"], cookies=cookies, timeout=60)
    web_b = httpx.Client(base_url=b["url"], cookies=cookies, timeout=60)
    assert web_a.get(f"/t/{team.slug}/play/?version={form.label}").status_code == 200
    csrf = {"X-CSRFToken": web_a.cookies["csrftoken"]}
    web_b.cookies.set("csrftoken", web_a.cookies["csrftoken"])
    started = web_a.post(f"/t/{team.slug}/play/start/", data={"version": form.label, "task_id": "basic", "seed": "0"},
                         headers=csrf)
    assert started.status_code == 302, started.text[-2000:]
    page_path = started.headers["location"]
    page = web_b.get(page_path)
    assert page.status_code == 200 and "[1] input[text] name=name" in page.text

    def act(web, action):
        response = web.post(page_path + "act/", json=action, headers=csrf)
        assert response.status_code == 200, response.text[-2000:]
        return response.json()

    act(web_b, {"action": "fill", "selector": "input[name=name]", "value": "Ada Lovelace"})
    act(web_a, {"action": "fill", "selector": "input[name=email]", "value": "ada@example.org"})
    submitted = act(web_b, {"action": "click", "selector": "button[type=submit]"})
    assert submitted["observation"]["title"] == "Welcome"
    for web in (web_a, web_b):  # the screenshot, written by one host, served by either web process
        shot = web.get(submitted["artifact_url"])
        assert shot.status_code == 200 and shot.content[:3] == b"\xff\xd8\xff", shot.status_code  # a JPEG
    assert act(web_b, {"action": "done", "answer": "signed up"})["done"] is True
    finished = web_a.post(page_path + "finish/", headers=csrf)
    assert finished.status_code == 302, finished.text[-2000:]
    rollout = Rollout.objects.get(pk=int(finished.headers["location"].rstrip("/").rsplit("/", 1)[1]))
    assert (rollout.status, rollout.verifier_reward, rollout.run.agent.kind) == ("succeeded", 1.0, AgentKind.HUMAN)
    assert rollout.steps.count() == 4 and all(step.artifact for step in rollout.steps.all())

    # No shared folders: nothing was written to either host's media folder (artifacts live in S3).
    assert not any(path.is_file() for host in (a, b) for path in host["media"].rglob("*"))
    for client in (api_a, api_b, web_a, web_b):
        client.close()
