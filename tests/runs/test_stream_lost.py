"""A live viewer across a Redis restart (issue 15, nothing lost): the web process notices that the
channel layer's Redis is gone, tells its viewers (a `stream` message, then close code 4503), and a
viewer that reconnects once Redis is back gets every step stored meanwhile and the true final status;
without that it froze mid-rollout with no close and no final status."""
import json
import time

import pytest
from django.conf import settings as django_settings
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from runs import events, services
from runs.models import Rollout, RolloutStatus, Step
from studio import services as studio_services
from tests.processes import kill_group, private_redis, start_asgi_server  # noqa: F401 - fixtures
from tests.runs.rollout_factories import IDLE_ENV_PY, package_version, random_agent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]



def store_and_publish(rollout: Rollout, indexes) -> None:
    """What the episode's step writer does: store a batch, count it, publish it (a publish to a dead
    Redis is logged and dropped)."""
    steps = [{"index": i, "action": 0, "observation": {"n": i}, "reward": 1.0, "terminated": False, "truncated": False,
              "info": {}, "elapsed_ms": 0.5} for i in indexes]
    Step.objects.bulk_create([Step(rollout_id=rollout.pk, **s) for s in steps])
    Rollout.objects.filter(pk=rollout.pk).update(step_count=steps[-1]["index"] + 1, status=RolloutStatus.RUNNING)
    events.publish_steps(rollout, steps)


def read_until_closed(viewer, indexes: list[int], statuses: list[dict]) -> tuple[int | None, list[dict]]:
    """Everything a viewer gets until the server closes it: (close code, other messages)."""
    others = []
    try:
        while True:
            message = json.loads(viewer.recv(timeout=15))
            if message["type"] == "steps":
                indexes.extend(step["index"] for step in message["steps"])
            elif message["type"] == "status":
                statuses.append(message)
            else:
                others.append(message)
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else None), others


def test_viewer_is_told_when_redis_is_lost_and_resyncs_to_the_final_status(tmp_path, settings, team, owner, private_redis):
    layer = dict(django_settings.CHANNEL_LAYERS["default"])
    settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": {**layer["CONFIG"], "hosts": [private_redis.url]}}}
    version = package_version(team, owner, "stream-lost", IDLE_ENV_PY)
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), enqueue=False)
    rollout = run.rollouts.get()
    _, token = studio_services.token_create(team=team, actor=owner, name="viewer")
    web, url = start_asgi_server(tmp_path / "web.log", env={"REDIS_URL": private_redis.url})
    ws_url = f"{url.replace('http', 'ws')}/ws/rollouts/{rollout.pk}/?token={token}"
    indexes, statuses = [], []
    try:
        store_and_publish(rollout, range(0, 10))
        with connect(ws_url, origin=url, open_timeout=30) as viewer:
            while len(indexes) < 10 or not statuses:
                message = json.loads(viewer.recv(timeout=10))
                if message["type"] == "steps":
                    indexes.extend(step["index"] for step in message["steps"])
                else:
                    statuses.append(message)
            store_and_publish(rollout, range(10, 15))
            while len(indexes) < 15:
                indexes.extend(step["index"] for step in json.loads(viewer.recv(timeout=10))["steps"])

            with connect(f"{url.replace('http', 'ws')}/ws/runs/{run.pk}/?token={token}&batch=1", origin=url,
                         open_timeout=30) as run_viewer:
                assert json.loads(run_viewer.recv(timeout=10))["type"] == "run"
                private_redis.kill()
                code, others = read_until_closed(viewer, indexes, statuses)
                run_code, run_others = read_until_closed(run_viewer, [], [])
        assert code == 4503 and others == [{"type": "stream", "status": "lost"}], (code, others)
        assert run_code == 4503 and run_others[-1] == {"type": "stream", "status": "lost"}, (run_code, run_others)

        # While Redis is down the rollout goes on and ends; none of it reaches a channel layer.
        store_and_publish(rollout, range(15, 25))
        Rollout.objects.filter(pk=rollout.pk).update(status=RolloutStatus.SUCCEEDED, verifier_reward=1.0, verifier_reason="done")
        events.publish_rollout(Rollout.objects.get(pk=rollout.pk))
        private_redis.start()

        # The viewer reconnects after the last step it has, as the page does, until the server takes it.
        deadline = time.monotonic() + 30
        while True:
            try:
                with connect(f"{ws_url}&after={indexes[-1]}", origin=url, open_timeout=10) as viewer:
                    code, others = read_until_closed_or_final(viewer, indexes, statuses)
                if statuses[-1]["status"] == RolloutStatus.SUCCEEDED:
                    break
            except (InvalidStatus, ConnectionClosed, OSError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "the viewer never got back on after Redis came back"
            time.sleep(0.5)
    finally:
        kill_group(web)

    rollout.refresh_from_db()
    assert indexes == list(range(25))  # every step once, in order, across the outage
    final = statuses[-1]
    assert {k: final[k] for k in events.rollout_status(rollout)} == events.rollout_status(rollout)


def read_until_closed_or_final(viewer, indexes: list[int], statuses: list[dict]):
    """Read until a finished status arrives (then leave) or the server closes the socket."""
    try:
        while True:
            message = json.loads(viewer.recv(timeout=15))
            if message["type"] == "steps":
                indexes.extend(step["index"] for step in message["steps"])
            elif message["type"] == "status":
                statuses.append(message)
                if message["status"] == RolloutStatus.SUCCEEDED:
                    return None, []
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else None), []
