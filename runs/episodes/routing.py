"""How web processes reach the episode hosts that hold interactive episodes: Redis lists.

A request is a JSON object pushed onto a host's list (or onto the shared start list, which any idle
host takes); the reply comes back on a list of its own that the caller blocks on. Which host holds
an episode is a Redis hash, so any web process reaches any episode. A host announces itself with a
key that expires within HOST_TTL_S unless renewed: a caller waiting on a host that stopped renewing
gets an error naming the lost host instead of a hang.
"""
import json
import threading
import time
import uuid

import redis
from django.conf import settings

HOST_TTL_S = 3.0
ROUTE_TTL_S = 30
REPLY_TTL_S = 60


def prefix() -> str:
    return f"{settings.EPISODE_HOST_PREFIX}:eh"


def start_queue() -> str:
    return f"{prefix()}:start"


def host_queue(host_id: str) -> str:
    return f"{prefix()}:host:{host_id}"


def host_alive_key(host_id: str) -> str:
    return f"{prefix()}:alive:{host_id}"


def route_key(episode_id: str) -> str:
    return f"{prefix()}:ep:{episode_id}"


def reply_key(request_id: str) -> str:
    return f"{prefix()}:reply:{request_id}"


_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def client() -> redis.Redis:
    """This process's Redis client (a connection pool shared by its threads)."""
    url = settings.EPISODE_HOST_REDIS_URL
    found = _clients.get(url)
    if found is None:
        with _clients_lock:
            found = _clients.get(url) or redis.Redis.from_url(url, health_check_interval=30)
            _clients[url] = found
    return found


class HostUnavailable(Exception):
    """No episode host answered, or the one holding the episode stopped; the text says which."""


class HostError(Exception):
    """The host refused or failed the request: `status` is the HTTP status the edge should answer."""

    def __init__(self, message: str, status: int = 400, field: str | None = None):
        super().__init__(message)
        self.status, self.field = status, field


def hosts_key() -> str:
    return f"{prefix()}:hosts"


def announce_host(r: redis.Redis, host_id: str) -> None:
    """A host says it is alive for the next HOST_TTL_S: its own key (checked by callers waiting on
    it) and its entry in the set of hosts (scored by when it expires; no KEYS scan on a busy Redis)."""
    expires = time.time() + HOST_TTL_S
    pipe = r.pipeline(transaction=False)
    pipe.set(host_alive_key(host_id), str(expires), px=int(HOST_TTL_S * 1000))
    pipe.zadd(hosts_key(), {host_id: expires})
    pipe.zremrangebyscore(hosts_key(), "-inf", time.time() - 60)
    pipe.execute()


def retire_host(r: redis.Redis, host_id: str) -> None:
    pipe = r.pipeline(transaction=False)
    pipe.delete(host_alive_key(host_id))
    pipe.zrem(hosts_key(), host_id)
    pipe.execute()


def live_hosts() -> list[str]:
    return [member.decode() for member in client().zrangebyscore(hosts_key(), time.time(), "+inf")]


def host_is_alive(host_id: str) -> bool:
    return bool(client().exists(host_alive_key(host_id)))


def _request(message: dict, host_id: str | None) -> tuple[str, str, str]:
    """(queue, reply key, JSON payload) of one request."""
    request_id = uuid.uuid4().hex
    payload = json.dumps({**message, "reply": request_id}, separators=(",", ":"), allow_nan=False)
    return (host_queue(host_id) if host_id else start_queue()), reply_key(request_id), payload


NO_HOST = "No episode host is running (start one with `manage.py episode_host`)."


def _lost(host_id: str | None) -> HostUnavailable:
    if host_id is None:
        return HostUnavailable("No episode host is running any more (the one taking this request stopped).")
    return HostUnavailable(f"The episode host holding this episode ({host_id}) stopped.")


def call(*, message: dict, host_id: str | None, timeout_s: float) -> dict:
    """Send `message` to `host_id` (None: to whichever host takes the next start) and wait for its
    reply. Raises HostUnavailable when the host is gone (or none runs), HostError for refusals."""
    r = client()
    if host_id is None and not live_hosts():
        raise HostUnavailable(NO_HOST)
    queue, key, payload = _request(message, host_id)
    r.rpush(queue, payload)
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HostUnavailable(f"The episode host did not answer within {timeout_s:g} s.")
        found = r.blpop([key], timeout=min(1.0, max(remaining, 0.01)))
        if found is not None:
            return _unwrap(json.loads(found[1]))
        if not (host_is_alive(host_id) if host_id else live_hosts()):
            raise _lost(host_id)


# -- the same, for code on an event loop (the ASGI fast path of session steps) --------------------

_async_clients: dict[tuple[int, str], "redis.asyncio.Redis"] = {}


def async_client():
    """A redis.asyncio client for the running event loop."""
    import asyncio

    import redis.asyncio

    key = (id(asyncio.get_running_loop()), settings.EPISODE_HOST_REDIS_URL)
    found = _async_clients.get(key)
    if found is None:
        found = _async_clients[key] = redis.asyncio.Redis.from_url(settings.EPISODE_HOST_REDIS_URL)
    return found


async def acall(*, message: dict, host_id: str, timeout_s: float) -> dict:
    """`call` to a known host, awaited on the event loop instead of blocking a thread."""
    r = async_client()
    queue, key, payload = _request(message, host_id)
    await r.rpush(queue, payload)
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HostUnavailable(f"The episode host did not answer within {timeout_s:g} s.")
        found = await r.blpop([key], timeout=min(1.0, max(remaining, 0.01)))
        if found is not None:
            return _unwrap(json.loads(found[1]))
        if not await r.exists(host_alive_key(host_id)):
            raise _lost(host_id)


async def aroute_of(episode_id: str) -> tuple[str, int, int] | None:
    found = _route_cache.get(episode_id)
    if found is not None:
        return found
    raw = await async_client().get(route_key(episode_id))
    return None if raw is None else _remember(episode_id, raw)


def _unwrap(reply: dict) -> dict:
    if reply.get("ok"):
        return reply.get("result") or {}
    raise HostError(reply.get("error") or "the episode host failed", reply.get("status") or 400, reply.get("field"))


def send_reply(r: redis.Redis, request_id: str, payload: dict, *, pipe=None) -> None:
    """Answer a request; `pipe` may already hold commands that must take effect first (a journal)."""
    key = reply_key(request_id)
    pipe = pipe if pipe is not None else r.pipeline(transaction=False)
    pipe.rpush(key, json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str))
    pipe.expire(key, REPLY_TTL_S)
    pipe.execute()


# -- routes ---------------------------------------------------------------------------------------

_route_cache: dict[str, tuple[str, int, int]] = {}
_ROUTE_CACHE_MAX = 50_000


def route_set(r: redis.Redis, *, episode_id: str, host_id: str, team_id: int, rollout_id: int) -> None:
    r.set(route_key(episode_id), f"{host_id}|{team_id}|{rollout_id}", ex=ROUTE_TTL_S)


def route_of(episode_id: str) -> tuple[str, int, int] | None:
    """(host id, team id, rollout id) of an open episode; cached per process, since an episode never
    moves between hosts (a forgotten one is dropped from the cache by `route_forget`)."""
    found = _route_cache.get(episode_id)
    if found is not None:
        return found
    raw = client().get(route_key(episode_id))
    return None if raw is None else _remember(episode_id, raw)


def _remember(episode_id: str, raw: bytes) -> tuple[str, int, int]:
    host_id, team_id, rollout_id = raw.decode().rsplit("|", 2)
    found = (host_id, int(team_id), int(rollout_id))
    if len(_route_cache) > _ROUTE_CACHE_MAX:
        _route_cache.clear()
    _route_cache[episode_id] = found
    return found


def route_forget(episode_id: str) -> None:
    _route_cache.pop(episode_id, None)
