"""Redis restarted under load: sessions stepping through a web process and an episode host, rollouts
running on a worker, all on a private Redis that is killed and started again (without persistence, so
every queue, route and reply list is gone). Clients get a clear error naming Redis, never a hang; no
rollout is left running; every step a client was answered is stored once, as answered."""
import threading
import time
import uuid

import httpx
import pytest

from runs.models import Rollout, RolloutStatus
from tests.agents.test_episode_hosts import COUNTER, TASKS
from tests.processes import (  # noqa: F401 - fixtures
    database_url,
    kill_group,
    private_redis,
    start_asgi_server,
    start_celery_worker,
    start_episode_host,
    wait_for,
)
from tests.runs.rollout_factories import package_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

SLOW_COUNT = """
    import time

    class Env:
        action_space = {"type": "discrete", "n": 2}

        def reset(self, task, seed):
            self.n = 0
            return {"n": 0}

        def step(self, action):
            time.sleep(0.01)
            self.n += 1
            return {"n": self.n}, 1.0, False, False, {}

        def verify(self):
            return 1.0, f"n={self.n}"
"""
SESSIONS = 6


class Stepper(threading.Thread):
    """Steps one session with action 1 until told to stop; records every answer and its duration."""

    def __init__(self, http: httpx.Client, sid: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.http, self.sid, self.stop = http, sid, stop
        self.answers: list[tuple[float, float, int, dict]] = []  # (sent at, seconds, status, body)
        self.failures: list[str] = []

    def run(self):
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                response = self.http.post(f"/sessions/{self.sid}/step", json={"action": 1})
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
                time.sleep(0.05)
                continue
            self.answers.append((sent, time.monotonic() - sent, response.status_code, response.json()))
            if response.status_code != 200:
                time.sleep(0.05)


@pytest.mark.parametrize("direct", [False, True], ids=["through-redis", "direct"])
def test_redis_restarted_under_load(tmp_path, settings, team, owner, private_redis, direct):
    """Through Redis (a host announcing no address), steps during the outage are refused naming
    Redis; over the direct plane, steps of open sessions need no Redis and carry on (any refusal still
    names Redis). Either way every answered step is stored once, as answered."""
    from studio import services as studio_services

    package_version(team, owner, "counter", COUNTER, tasks=TASKS, max_steps=100_000)
    package_version(team, owner, "slow-count", SLOW_COUNT, max_steps=700)
    prefix, queue = f"test-rr-{uuid.uuid4().hex[:8]}", f"test-rr-{uuid.uuid4().hex[:8]}"
    settings.EPISODE_HOST_REDIS_URL = private_redis.url
    env = {"REDIS_URL": private_redis.url, "CELERY_BROKER_URL": private_redis.url,
           "EPISODE_HOST_REDIS_URL": private_redis.url, "EPISODE_HOST_PREFIX": prefix, "CELERY_QUEUE": queue,
           "TEAM_MAX_RUNNING_ROLLOUTS": "0",  # both worker slots run the one team's rollouts
           "EPISODE_HOST_DIRECT": "true" if direct else "false"}
    _, token = studio_services.token_create(team=team, actor=owner, name="restart")
    processes = []
    try:
        processes.append(start_episode_host(tmp_path / "host.log", prefix=prefix, db_url=database_url(), env=env))
        processes.append(start_celery_worker(tmp_path / "worker.log", queue=queue, env=env))
        web, url = start_asgi_server(tmp_path / "web.log", env=env)
        processes.append(web)
        http = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)

        run = http.post("/runs", json={"version": "slow-count@1", "agent": "random", "seeds": "0-1"})
        assert run.status_code == 201, run.content
        run_id = run.json()["id"]
        wait_for(lambda: Rollout.objects.filter(run_id=run_id, status=RolloutStatus.RUNNING).count() == 2, 60,
                 "both worker rollouts to run")
        sids = []
        for _ in range(SESSIONS):
            opened = http.post("/sessions", json={"version": "counter@1", "task_id": "t1"})
            assert opened.status_code == 201, opened.content
            sids.append(opened.json()["session_id"])

        stop = threading.Event()
        steppers = [Stepper(http, sid, stop) for sid in sids]
        for stepper in steppers:
            stepper.start()
        time.sleep(1.5)
        private_redis.kill()
        down_at = time.monotonic()
        time.sleep(2.0)
        private_redis.start()
        up_at = time.monotonic()
        time.sleep(4.0)
        stop.set()
        for stepper in steppers:
            stepper.join(timeout=60)

        # Clear errors, not hangs.
        answers = [answer for stepper in steppers for answer in stepper.answers]
        assert not [f for stepper in steppers for f in stepper.failures]
        assert max(seconds for _, seconds, _, _ in answers) < 10
        refused = [(status, body) for _, _, status, body in answers if status != 200]
        assert all(status == 503 and "Redis" in body["detail"] for status, body in refused), refused[:5]
        if direct:
            assert any(down_at <= sent <= up_at for sent, _, status, _ in answers if status == 200)
        else:
            assert refused, "the outage was never felt"
            assert any(down_at <= sent <= up_at for sent, _, status, _ in answers if status == 503)

        for stepper in steppers:
            ok = [(sent, body) for sent, _, status, body in stepper.answers if status == 200]
            assert any(sent > up_at for sent, _ in ok), "a session did not carry on after Redis came back"
            indexes = [body["index"] for _, body in ok]
            assert indexes == sorted(set(indexes)), indexes  # never answered twice
            closed = http.post(f"/sessions/{stepper.sid}/close")
            assert closed.status_code == 200, closed.content
            rollout = Rollout.objects.get(pk=closed.json()["rollout_id"])
            assert rollout.status == RolloutStatus.SUCCEEDED
            stored = dict(rollout.steps.values_list("index", "observation"))
            # Every answered step is stored as answered; the stored ones run 0..k-1 without a gap
            # (a step run whose answer Redis lost is stored too: it happened).
            assert sorted(stored) == list(range(len(stored))) == list(range(rollout.step_count))
            assert all(stored[body["index"]] == body["observation"] for _, body in ok)
            assert all(body["observation"] == {"n": body["index"] + 1} for _, body in ok)
        http.close()

        # The worker's rollouts end (their live stream lost a moment of Redis, not their steps).
        wait_for(lambda: not Rollout.objects.filter(status=RolloutStatus.RUNNING).exists(), 90,
                 "every rollout to end")
        for rollout in Rollout.objects.filter(run_id=run_id):
            assert rollout.status == RolloutStatus.SUCCEEDED or rollout.error, (rollout.status, rollout.error)
            assert rollout.steps.count() == rollout.step_count
    finally:
        for proc in processes:
            kill_group(proc)
