"""Two studios on one Redis (each its own database and Redis database number, neither naming its Redis
prefixes): Redis pub/sub channels are global across database numbers, so a fixed default prefix let a
viewer of studio A see studio B's live events for the same rollout id. Each now defaults to names of
its own."""
import json
import os
import subprocess
import sys
import uuid

import pytest
from django.conf import settings
from websockets.sync.client import connect

from runs import services
from studio import services as studio_services
from studio.settings import deployment_tag
from tests.processes import REPO, database_url, kill_group, start_asgi_server
from tests.runs.rollout_factories import IDLE_ENV_PY, package_version, random_agent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

# What a studio process publishes when a rollout takes a step (runs.events, the one emitter); prints
# the Redis names its settings chose.
PUBLISH = """
import json, sys
import django
django.setup()
from types import SimpleNamespace
from django.conf import settings
from runs import events
rollout_id, run_id, marker = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
step = {"index": 0, "action": 0, "observation": {"studio": marker}, "reward": 1.0, "terminated": False,
        "truncated": False, "info": {}, "elapsed_ms": 1.0}
events.publish_steps(SimpleNamespace(pk=rollout_id, run_id=run_id), [step])
print(json.dumps([settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"], settings.EPISODE_HOST_PREFIX,
                  settings.CELERY_TASK_DEFAULT_QUEUE]))
"""
UNNAMED = ("CHANNEL_LAYER_PREFIX", "EPISODE_HOST_PREFIX", "CELERY_QUEUE")


def redis_url(db: int) -> str:
    base, _, _ = settings.REDIS_URL.rpartition("/")
    return f"{base}/{db}"


def studio_env(database: str, redis_db: int) -> dict:
    """A studio process's environment: its database and Redis database number, default Redis names."""
    env = {key: value for key, value in os.environ.items() if key not in UNNAMED}
    return env | {"DATABASE_URL": database, "REDIS_URL": redis_url(redis_db), "DJANGO_SETTINGS_MODULE": "studio.settings",
                  "DEBUG": "true", "LOG_LEVEL": "WARNING"}


def publish(env: dict, rollout, marker: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PUBLISH, str(rollout.pk), str(rollout.run_id), marker], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_default_redis_names_differ_between_databases_and_stay_configurable(tmp_path):
    a, b = deployment_tag("studio_a", "key"), deployment_tag("studio_b", "key")
    assert a != b and a == deployment_tag("studio_a", "key") and a != deployment_tag("studio_a", "other key")
    named = studio_env("postgres://postgres@127.0.0.1:5432/studio_named", 0) | {
        "CHANNEL_LAYER_PREFIX": "chosen", "EPISODE_HOST_PREFIX": "hosts", "CELERY_QUEUE": "queue"}
    code = "import django; django.setup(); from django.conf import settings as s; print(s.CHANNEL_LAYERS['default']['CONFIG']['prefix'], s.EPISODE_HOST_PREFIX, s.CELERY_TASK_DEFAULT_QUEUE)"
    done = subprocess.run([sys.executable, "-c", code], env=named, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["chosen", "hosts", "queue"], done.stderr


def test_a_viewer_of_one_studio_never_gets_another_studios_event_for_the_same_rollout_id(tmp_path, team, owner):
    version = package_version(team, owner, "two-studios", IDLE_ENV_PY)
    run = services.run_create(team=team, actor=owner, version=version, agent=random_agent(team, owner), enqueue=False)
    rollout = run.rollouts.get()
    _, token = studio_services.token_create(team=team, actor=owner, name="viewer")
    own_db = int(settings.REDIS_URL.rpartition("/")[2] or 0)
    studio_a = studio_env(database_url(), own_db)
    studio_b = studio_env(database_url().rpartition("/")[0] + f"/studio_other_{uuid.uuid4().hex[:8]}", (own_db + 1) % 16)

    web, url = start_asgi_server(tmp_path / "web-a.log", env={**studio_a, **{name: None for name in UNNAMED}})
    try:
        with connect(f"{url.replace('http', 'ws')}/ws/rollouts/{rollout.pk}/?token={token}&backlog=0",
                     origin=url, open_timeout=30) as viewer:
            assert json.loads(viewer.recv(timeout=10))["type"] == "status"  # subscribed
            names_b = publish(studio_b, rollout, "B")
            names_a = publish(studio_a, rollout, "A")
            received = json.loads(viewer.recv(timeout=10))
            assert received["type"] == "steps" and received["steps"][0]["observation"] == {"studio": "A"}, received
            with pytest.raises(TimeoutError):
                print(viewer.recv(timeout=0.5))
    finally:
        kill_group(web)
    # Channel layer, episode hosts and the Celery queue: each studio its own names, none of them shared.
    assert all(a != b for a, b in zip(names_a, names_b)), (names_a, names_b)
