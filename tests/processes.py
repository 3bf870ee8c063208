"""Real processes for tests: a Celery worker and the ASGI server, against the pytest-django database."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def celery_queue():
    """A queue of this test's own; the test process sends to it, its workers consume it."""
    from studio.celery import app

    name = f"test-{uuid.uuid4().hex[:10]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = name
    yield name
    app.conf.task_default_queue = previous
    forget_queue(name)


def forget_queue(name: str) -> None:
    """Drop the queue and any unacked message a killed worker left for it."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(name)
    for tag, raw in client.hgetall("unacked").items():
        try:
            if json.loads(raw)[2] == name:
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)
        except (ValueError, IndexError, TypeError):
            continue


@pytest.fixture
def celery_worker(celery_queue, tmp_path):
    """A running Celery worker on the test's queue and database; killed at the end."""
    env = os.environ | {"DATABASE_URL": database_url(), "CELERY_QUEUE": celery_queue, "LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [str(BIN / "celery"), "-A", "studio", "worker", "-Q", celery_queue, "-c", "2", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "-l", "warning", "-n", f"{celery_queue}@%h"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"), start_new_session=True,
    )
    yield proc
    kill_group(proc)


@pytest.fixture
def asgi_server(tmp_path):
    """The studio served by uvicorn (pages, API and websockets) on a free port; yields its base URL.
    It enqueues rollouts where this test process does (a test's `celery_queue`, when it asks first)."""
    from studio.celery import app

    port = free_port()
    env = os.environ | {
        "DATABASE_URL": database_url(), "DEBUG": "true", "LOG_LEVEL": "WARNING",
        "CELERY_QUEUE": app.conf.task_default_queue,
    }
    proc = subprocess.Popen(
        [str(BIN / "uvicorn"), "studio.asgi:application", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "asgi.log", "wb"), start_new_session=True,
    )

    def up():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return proc.poll() is not None and (_ for _ in ()).throw(AssertionError((tmp_path / "asgi.log").read_text()))

    wait_for(up, 30, "the ASGI server to listen")
    yield f"http://127.0.0.1:{port}"
    kill_group(proc)
