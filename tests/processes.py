"""Real processes for tests: a Celery worker and the ASGI server, against the pytest-django database."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
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


def start_celery_worker(log_path: Path, *, queue: str, env: dict | None = None, prefix: list[str] | None = None,
                        name: str | None = None, loglevel: str = "warning") -> subprocess.Popen:
    """A Celery worker (2 processes) on `queue` and the test database; `prefix` wraps the command
    (e.g. `ip netns exec NS`), `env` adds to the environment. At loglevel info its log says
    "<name>@<host> ready." once it consumes."""
    full_env = os.environ | {"DATABASE_URL": database_url(), "CELERY_QUEUE": queue, "LOG_LEVEL": "WARNING",
                             "EPISODE_HOST_PREFIX": settings.EPISODE_HOST_PREFIX} | (env or {})
    return subprocess.Popen(
        [*(prefix or []), str(BIN / "celery"), "-A", "studio", "worker", "-Q", queue, "-c", "2", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "-l", loglevel, "-n", f"{name or queue}@%h"],
        cwd=REPO, env=full_env, stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"), start_new_session=True,
    )


@pytest.fixture
def celery_worker(celery_queue, tmp_path):
    """A running Celery worker on the test's queue and database; killed at the end."""
    proc = start_celery_worker(tmp_path / "worker.log", queue=celery_queue)
    yield proc
    kill_group(proc)


def start_asgi_server(log_path: Path, *, env: dict | None = None, prefix: list[str] | None = None,
                      host: str = "127.0.0.1") -> tuple[subprocess.Popen, str]:
    """The studio served by uvicorn on a free port, on the test database; returns (process, base URL).
    `env` adds to its environment (a None value unsets the variable); `prefix` wraps the command and `host` is where it listens (e.g. in
    a network namespace: `ip netns exec NS`, its own address)."""
    from studio.celery import app

    port = free_port()
    full_env = os.environ | {
        "DATABASE_URL": database_url(), "DEBUG": "true", "LOG_LEVEL": "WARNING",
        "CELERY_QUEUE": app.conf.task_default_queue, "EPISODE_HOST_PREFIX": settings.EPISODE_HOST_PREFIX,
    } | (env or {})
    full_env = {key: value for key, value in full_env.items() if value is not None}  # None: leave it unset
    proc = subprocess.Popen(
        [*(prefix or []), str(BIN / "uvicorn"), "studio.asgi:application", "--host", host, "--port", str(port),
         "--log-level", "warning", "--no-proxy-headers"],
        cwd=REPO, env=full_env, stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"), start_new_session=True,
    )

    def up():
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            return proc.poll() is not None and (_ for _ in ()).throw(AssertionError(log_path.read_text()))

    wait_for(up, 30, "the ASGI server to listen")
    return proc, f"http://{host}:{port}"


@pytest.fixture
def asgi_server(tmp_path):
    """The studio served by uvicorn (pages, API and websockets) on a free port; yields its base URL.
    It enqueues rollouts where this test process does (a test's `celery_queue`, when it asks first)."""
    proc, url = start_asgi_server(tmp_path / "asgi.log")
    yield url
    kill_group(proc)


@pytest.fixture(scope="session")
def episode_host_prefix():
    """Redis names of this test session's episode hosts, apart from any studio running on this machine."""
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    previous = settings.EPISODE_HOST_PREFIX
    settings.EPISODE_HOST_PREFIX = prefix
    yield prefix
    settings.EPISODE_HOST_PREFIX = previous


def start_episode_host(log_path: Path, *, prefix: str, db_url: str, env: dict | None = None,
                       wrap: list[str] | None = None) -> subprocess.Popen:
    """An episode host process (`manage.py episode_host`) on the test database; waits until it serves
    (announced in the Redis of `env`'s EPISODE_HOST_REDIS_URL, or of the settings). `wrap` wraps the command."""
    full_env = os.environ | {"DATABASE_URL": db_url, "EPISODE_HOST_PREFIX": prefix, "LOG_LEVEL": "WARNING",
                           "BROWSER_POOL_SIZE": "0"} | (env or {})  # no idle Chromium outliving a test
    proc = subprocess.Popen(
        [*(wrap or []), str(BIN / "python"), "manage.py", "episode_host"], cwd=REPO, env=full_env,
        stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"), start_new_session=True,
    )
    client = redis.Redis.from_url((env or {}).get("EPISODE_HOST_REDIS_URL") or settings.EPISODE_HOST_REDIS_URL)

    def serving():
        if proc.poll() is not None:
            raise AssertionError(f"the episode host exited: {log_path.read_text()[-2000:]}")
        # Its id is <hostname>-<pid>-<hex> (`ip netns exec` execs the command: the pid stays).
        return any(member.decode().split("-")[-2] == str(proc.pid) for member in client.zrange(f"{prefix}:eh:hosts", 0, -1))

    wait_for(serving, 30, "the episode host to serve")
    return proc


@pytest.fixture(scope="session")
def episode_host(django_db_setup, django_db_blocker, episode_host_prefix, tmp_path_factory):
    """One episode host for the test session (interactive tests need `transaction=True` data)."""
    with django_db_blocker.unblock():
        db_url = database_url()
    folder = tmp_path_factory.mktemp("host")
    proc = start_episode_host(folder / "host.log", prefix=episode_host_prefix, db_url=db_url,
                              env={"MEDIA_ROOT": str(folder / "media")})
    yield proc
    kill_group(proc)


@pytest.fixture
def own_episode_host(tmp_path, settings):
    """own_episode_host(**env) -> a host of this test alone (its own Redis names), e.g. with short timeouts."""
    started = []

    def start(**env):
        prefix = f"test-own-{uuid.uuid4().hex[:8]}"
        settings.EPISODE_HOST_PREFIX = prefix
        proc = start_episode_host(tmp_path / f"host-{len(started)}.log", prefix=prefix, db_url=database_url(),
                                  env={key: str(value) for key, value in env.items()})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_group(proc)


class RedisServer:
    """A private redis-server on a free port, without persistence: killing and starting it again is
    what a Redis restart does to the studio (every key, queue and reply list is gone)."""

    def __init__(self, folder: Path, *, bind: str = "127.0.0.1"):
        self.folder, self.bind, self.port = folder, bind, free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.bind}:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", self.bind, "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), "--protected-mode", "no"],
            stdout=open(self.folder / "redis.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        client = redis.Redis(host=self.bind, port=self.port, socket_connect_timeout=0.5)

        def answers():
            try:
                return client.ping()
            except redis.RedisError:
                return False

        wait_for(answers, 10, "redis-server to answer")

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)
            self.proc = None


@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of this test alone (see RedisServer); stopped at the end."""
    folder = tmp_path / "redis"
    folder.mkdir()
    server = RedisServer(folder)
    server.start()
    yield server
    server.kill()


class TcpForwarder:
    """TCP forwarding from addresses of this process to other ones (e.g. from a veth address that a
    network namespace reaches to a server listening only on loopback), on an event loop thread."""

    def __init__(self):
        import asyncio

        self.asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        self.servers = []
        self.thread = threading.Thread(target=self.loop.run_forever, name="tcp-forwarder", daemon=True)
        self.thread.start()

    def forward(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        async def pipe(reader, writer):
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
            except (ConnectionError, OSError):
                pass

        async def connect(client_reader, client_writer):
            try:
                reader, writer = await self.asyncio.open_connection(*target)
            except OSError:
                client_writer.close()
                return
            await self.asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))
            for end in (writer, client_writer):
                end.close()

        async def serve():
            return await self.asyncio.start_server(connect, *listen)

        self.servers.append(self.asyncio.run_coroutine_threadsafe(serve(), self.loop).result(timeout=10))

    def close(self) -> None:
        asyncio = self.asyncio

        async def stop():
            for server in self.servers:
                server.close()
            connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in connections:
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


class NetworkNamespace:
    """A network namespace joined to this one by a veth pair: `outside` (10.231.N.1) is this side's
    address, `inside` (10.231.N.2) the namespace's. `wrap(hostname)` runs a command inside it under a
    hostname of its own (a UTS namespace), as on a machine of its own."""

    def __init__(self, tag: str):
        self.name = f"studio-{tag}"
        self.subnet = _free_subnet()
        self.outside, self.inside = f"10.231.{self.subnet}.1", f"10.231.{self.subnet}.2"
        self.veth_outside, self.veth_inside = f"vs{tag}o"[:15], f"vs{tag}i"[:15]

    def create(self) -> None:
        self.created = True
        for command in (
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.veth_outside, "type", "veth", "peer", "name", self.veth_inside],
            ["ip", "link", "set", self.veth_inside, "netns", self.name],
            ["ip", "addr", "add", f"{self.outside}/24", "dev", self.veth_outside],
            ["ip", "link", "set", self.veth_outside, "up"],
            ["ip", "netns", "exec", self.name, "ip", "addr", "add", f"{self.inside}/24", "dev", self.veth_inside],
            ["ip", "netns", "exec", self.name, "ip", "link", "set", self.veth_inside, "up"],
            ["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"],
        ):
            subprocess.run(command, check=True, capture_output=True, text=True)

    def wrap(self, hostname: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname]

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.veth_outside], capture_output=True)


def _free_subnet() -> int:
    import random

    taken = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    free = [n for n in range(10, 250) if f"10.231.{n}." not in taken]
    return random.choice(free)


def network_namespaces_or_skip(count: int) -> list[NetworkNamespace]:
    """`count` created network namespaces, or a skip saying why they cannot be made here."""
    import shutil

    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("network namespaces need iproute2's `ip` and util-linux's `unshare`")
    made = []
    for _ in range(count):
        namespace = NetworkNamespace(uuid.uuid4().hex[:6])
        try:
            namespace.create()
        except subprocess.CalledProcessError as exc:
            namespace.delete()
            for other in made:
                other.delete()
            pytest.skip(f"cannot create a network namespace here: {' '.join(exc.cmd)}: {exc.stderr.strip()}")
        made.append(namespace)
    return made
