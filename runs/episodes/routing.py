"""How web processes reach the episode hosts that hold interactive episodes: Redis lists, and for
the requests of a routed episode (steps, observations, closes), a direct connection to its host
when the host announced an address (direct.py).

A request is a JSON object pushed onto a host's list (or onto the shared start list, which any idle
host takes); the reply comes back on a list of its own that the caller blocks on. Which host holds
an episode is a Redis hash, so any web process reaches any episode. A host announces itself with a
key that expires within HOST_TTL_S unless renewed: a caller waiting on a host that stopped renewing
gets an error naming the lost host instead of a hang, after a grace of HOST_GRACE_S (a renewal
missed under load is not a death).

Every Redis failure on this path becomes RedisUnavailable, naming Redis: the clients never retry a
command on their own (a retried RPUSH could run a step twice) and give up on a dead connection within
seconds instead of waiting on it.
"""
import json
import threading
import time
import uuid

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..artifacts import array_json_default

HOST_TTL_S = 3.0
# A host is declared dead only after its presence key has been missing this long, and a start waits
# this long for some host to be serving.
HOST_GRACE_S = 2.0
# How long one blocking read for a reply lasts before the caller checks on the host again.
WAIT_SLICE_S = 0.5
CONNECT_TIMEOUT_S = 2.0
SOCKET_TIMEOUT_S = 5.0  # longer than any blocking read here (at most 1 s)
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


def host_address_key(host_id: str) -> str:
    return f"{prefix()}:addr:{host_id}"


def route_key(episode_id: str) -> str:
    return f"{prefix()}:ep:{episode_id}"


def reply_key(request_id: str) -> str:
    return f"{prefix()}:reply:{request_id}"


_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def client_options() -> dict:
    """No silent retries (a command is sent once: the caller decides), bounded waits on a dead peer."""
    return {"retry": Retry(NoBackoff(), 0), "socket_connect_timeout": CONNECT_TIMEOUT_S,
            "socket_timeout": SOCKET_TIMEOUT_S, "health_check_interval": 30}


def client() -> redis.Redis:
    """This process's Redis client (a connection pool shared by its threads)."""
    url = settings.EPISODE_HOST_REDIS_URL
    found = _clients.get(url)
    if found is None:
        with _clients_lock:
            found = _clients.get(url) or redis.Redis.from_url(url, **client_options())
            _clients[url] = found
    return found


class RedisUnavailable(Exception):
    """Redis, through which web processes reach episode hosts, failed; the text names it and why."""


def redis_unavailable(exc: Exception) -> RedisUnavailable:
    return RedisUnavailable(
        f"Redis (which routes requests to episode hosts) is unreachable: {exc}. The request was not answered;"
        " try again once Redis is back."
    )


class HostUnavailable(Exception):
    """No episode host answered, or the one holding the episode stopped; the text says which."""


class HostError(Exception):
    """The host refused or failed the request: `status` is the HTTP status the edge should answer."""

    def __init__(self, message: str, status: int = 400, field: str | None = None):
        super().__init__(message)
        self.status, self.field = status, field


def hosts_key() -> str:
    return f"{prefix()}:hosts"


def announce_host(r: redis.Redis, host_id: str, address: str | None = None) -> None:
    """A host says it is alive for the next HOST_TTL_S: its own key (checked by callers waiting on
    it) and its entry in the set of hosts (scored by when it expires; no KEYS scan on a busy Redis);
    with `address` ("host:port token"), where web processes reach it directly and the token they
    show it (direct.py)."""
    expires = time.time() + HOST_TTL_S
    pipe = r.pipeline(transaction=False)
    pipe.set(host_alive_key(host_id), str(expires), px=int(HOST_TTL_S * 1000))
    if address:
        pipe.set(host_address_key(host_id), address, ex=ROUTE_TTL_S)
    pipe.zadd(hosts_key(), {host_id: expires})
    pipe.zremrangebyscore(hosts_key(), "-inf", time.time() - 60)
    pipe.execute()


def retire_host(r: redis.Redis, host_id: str) -> None:
    pipe = r.pipeline(transaction=False)
    pipe.delete(host_alive_key(host_id), host_address_key(host_id))
    pipe.zrem(hosts_key(), host_id)
    pipe.execute()


def live_hosts() -> list[str]:
    try:
        return [member.decode() for member in client().zrangebyscore(hosts_key(), time.time(), "+inf")]
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None


def host_is_alive(host_id: str) -> bool:
    try:
        return bool(client().exists(host_alive_key(host_id)))
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None


def wait_for_a_host(timeout_s: float = HOST_GRACE_S) -> bool:
    """True once some host serves (a host restarting, or one that missed a renewal, gets a moment)."""
    deadline = time.monotonic() + timeout_s
    while not live_hosts():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


class HostWatch:
    """Decides when a caller stops waiting for a host: only once it has been missing HOST_GRACE_S."""

    def __init__(self, host_id: str | None):
        self.host_id = host_id
        self.missing_since: float | None = None

    def lost(self, alive: bool) -> bool:
        if alive:
            self.missing_since = None
            return False
        now = time.monotonic()
        if self.missing_since is None:
            self.missing_since = now
        return now - self.missing_since >= HOST_GRACE_S


def _request(message: dict, host_id: str | None) -> tuple[str, str, str]:
    """(queue, reply key, JSON payload) of one request."""
    request_id = uuid.uuid4().hex
    payload = json.dumps({**message, "reply": request_id}, separators=(",", ":"), allow_nan=False)
    return (host_queue(host_id) if host_id else start_queue()), reply_key(request_id), payload


NO_HOST = "No episode host is running (start one with `manage.py episode_host`)."


def lost(host_id: str | None) -> HostUnavailable:
    if host_id is None:
        return HostUnavailable("No episode host is running any more (the one taking this request stopped).")
    return HostUnavailable(f"The episode host holding this episode ({host_id}) stopped.")


# -- where a host is reached directly (direct.py) ---------------------------------------------------

_addresses: dict[str, tuple[str | None, float]] = {}
# A host that announced no address (an older one) is asked again after this long.
NO_ADDRESS_RECHECK_S = 5.0


def _address_cached(host_id: str) -> tuple[bool, str | None]:
    found = _addresses.get(host_id)
    if found is None:
        return False, None
    address, fetched = found
    if address is None and time.monotonic() - fetched > NO_ADDRESS_RECHECK_S:
        return False, None
    return True, address


def _address_remember(host_id: str, raw: bytes | None) -> str | None:
    if len(_addresses) > 10_000:
        _addresses.clear()
    address = raw.decode() if raw else None
    _addresses[host_id] = (address, time.monotonic())
    return address


def host_address(host_id: str) -> str | None:
    """What a host announced for direct connections, "host:port token" (cached: it never changes
    while the host lives), or None."""
    known, address = _address_cached(host_id)
    if known:
        return address
    try:
        return _address_remember(host_id, client().get(host_address_key(host_id)))
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None


async def ahost_address(host_id: str) -> str | None:
    known, address = _address_cached(host_id)
    if known:
        return address
    try:
        return _address_remember(host_id, await async_client().get(host_address_key(host_id)))
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None


def call_via_redis(*, message: dict, host_id: str | None, timeout_s: float) -> dict:
    if host_id is None and not wait_for_a_host():
        raise HostUnavailable(NO_HOST)
    r = client()
    queue, key, payload = _request(message, host_id)
    watch = HostWatch(host_id)
    try:
        deadline = time.monotonic() + timeout_s
        # The request and the first wait for its reply travel in one round trip.
        pipe = r.pipeline(transaction=False)
        pipe.rpush(queue, payload)
        pipe.blpop([key], timeout=min(WAIT_SLICE_S, timeout_s))
        found = pipe.execute()[1]
        while found is None:
            alive = bool(r.exists(host_alive_key(host_id))) if host_id else bool(live_hosts())
            if watch.lost(alive):
                _withdraw(r, queue, payload)
                raise lost(host_id)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _withdraw(r, queue, payload)
                raise HostUnavailable(f"The episode host did not answer within {timeout_s:g} s.")
            found = r.blpop([key], timeout=min(WAIT_SLICE_S, max(remaining, 0.01)))
        return unwrap(json.loads(found[1]))
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None


def _withdraw(r, queue: str, payload: str) -> None:
    """Take back a request nobody took yet, so no host runs it after its caller gave up."""
    r.lrem(queue, 1, payload)


# -- the same, for code on an event loop (the ASGI fast path of session steps) --------------------

_async_clients: dict[tuple[int, str], "redis.asyncio.Redis"] = {}


def async_client():
    """A redis.asyncio client for the running event loop."""
    import asyncio

    import redis.asyncio

    from redis.asyncio.retry import Retry as AsyncRetry

    key = (id(asyncio.get_running_loop()), settings.EPISODE_HOST_REDIS_URL)
    found = _async_clients.get(key)
    if found is None:
        found = _async_clients[key] = redis.asyncio.Redis.from_url(
            settings.EPISODE_HOST_REDIS_URL, **{**client_options(), "retry": AsyncRetry(NoBackoff(), 0)}
        )
    return found


async def acall_via_redis(*, message: dict, host_id: str, timeout_s: float) -> dict:
    r = async_client()
    queue, key, payload = _request(message, host_id)
    watch = HostWatch(host_id)
    try:
        deadline = time.monotonic() + timeout_s
        pipe = r.pipeline(transaction=False)  # the request and the first wait: one round trip
        pipe.rpush(queue, payload)
        pipe.blpop([key], timeout=min(WAIT_SLICE_S, timeout_s))
        found = (await pipe.execute())[1]
        while found is None:
            if watch.lost(bool(await r.exists(host_alive_key(host_id)))):
                await r.lrem(queue, 1, payload)
                raise lost(host_id)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                await r.lrem(queue, 1, payload)
                raise HostUnavailable(f"The episode host did not answer within {timeout_s:g} s.")
            found = await r.blpop([key], timeout=min(WAIT_SLICE_S, max(remaining, 0.01)))
        return unwrap(json.loads(found[1]))
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None


async def aroute_of(episode_id: str) -> tuple[str, int, int] | None:
    found = _route_cache.get(episode_id)
    if found is not None:
        return found
    try:
        raw = await async_client().get(route_key(episode_id))
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None
    return None if raw is None else _remember(episode_id, raw)


def unwrap(reply: dict) -> dict:
    if reply.get("ok"):
        return reply.get("result") or {}
    raise HostError(reply.get("error") or "the episode host failed", reply.get("status") or 400, reply.get("field"))


def send_reply(r: redis.Redis, request_id: str, payload: dict, *, pipe=None) -> None:
    """Answer a request; `pipe` may already hold commands that must take effect first (a journal)."""
    key = reply_key(request_id)
    pipe = pipe if pipe is not None else r.pipeline(transaction=False)
    pipe.rpush(key, json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=array_json_default))
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
    try:
        raw = client().get(route_key(episode_id))
    except redis.RedisError as exc:
        raise redis_unavailable(exc) from None
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
