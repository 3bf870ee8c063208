"""Revocation is immediate: revoking an API token or an OpenEnv key, or removing a member, closes the
live connections that credential holds in every web process within a second, and drops the caches
that would still accept it.

A connection registers the credentials it stands on as tags (`token:<id>`, `openenv-key:<id>`,
`member:<team id>:<user id>`) with `revocation_watch`. The services that revoke call
`revocation_publish` beside their write; after the commit it is published on Redis (one channel per
studio) and every process's listener thread (started by the first watch or cache) calls each matching
connection's callback on its own event loop, with a close code (4401 revoked credential, 4403 no
longer a member) and the reason, and empties every registered cache. The publishing process handles
it at once as well, without waiting for Redis."""
import asyncio
import itertools
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable

import redis
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

CLOSE_REVOKED = 4401
CLOSE_NOT_A_MEMBER = 4403

_lock = threading.Lock()
_watchers: dict[int, tuple[frozenset, asyncio.AbstractEventLoop, Callable[[int, str], Awaitable[None]]]] = {}
_caches: list[Callable[[], None]] = []
_ids = itertools.count()
_listener: threading.Thread | None = None


def token_tag(token_id: int) -> str:
    return f"token:{token_id}"


def openenv_key_tag(key_id: int) -> str:
    return f"openenv-key:{key_id}"


def member_tag(*, team_id: int, user_id: int) -> str:
    return f"member:{team_id}:{user_id}"


def _channel() -> str:
    return f"{settings.CHANNEL_LAYERS['default']['CONFIG'].get('prefix', settings.DEPLOYMENT_TAG)}:credentials-revoked"


def revocation_watch(*, tags, callback: Callable[[int, str], Awaitable[None]]) -> int:
    """Call `await callback(code, reason)` on the running loop when any of `tags` is revoked; returns a
    handle for `revocation_unwatch`."""
    ensure_listening()
    handle = next(_ids)
    with _lock:
        _watchers[handle] = (frozenset(tags), asyncio.get_running_loop(), callback)
    return handle


def revocation_unwatch(handle: int | None) -> None:
    if handle is not None:
        with _lock:
            _watchers.pop(handle, None)


def revocation_cache(clear: Callable[[], None]) -> None:
    """Register a cache of credentials: `clear()` is called on every revocation, in every process."""
    with _lock:
        _caches.append(clear)


def revocation_publish(*, tags, code: int, reason: str) -> None:
    """Tell every process (after the current transaction commits) that `tags` are revoked."""
    message = {"tags": sorted(tags), "code": code, "reason": reason}
    transaction.on_commit(lambda: _publish(message))


def _publish(message: dict) -> None:
    _deliver(message)
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5).publish(_channel(), json.dumps(message))
    except redis.RedisError:
        # The write stands (the credential is refused on its next check); other processes' open
        # connections last until their next check of it.
        logger.exception("could not publish a revocation to other processes")


def _deliver(message: dict) -> None:
    tags = set(message.get("tags") or ())
    with _lock:
        caches = list(_caches)
        hits = [(loop, callback) for watched, loop, callback in _watchers.values() if watched & tags]
    for clear in caches:
        clear()
    for loop, callback in hits:
        if loop.is_closed():
            continue
        try:
            loop.call_soon_threadsafe(asyncio.ensure_future, callback(message["code"], message["reason"]))
        except RuntimeError:  # the loop stopped meanwhile
            continue


def ensure_listening() -> None:
    """Start this process's listener thread once."""
    global _listener
    with _lock:
        if _listener is not None and _listener.is_alive():
            return
        _listener = threading.Thread(target=_listen, name="revocation-listener", daemon=True)
        _listener.start()


def _listen() -> None:
    backoff = 0.5
    while True:
        try:
            pubsub = redis.Redis.from_url(settings.REDIS_URL, health_check_interval=30).pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(_channel())
            backoff = 0.5
            while True:
                message = pubsub.get_message(timeout=1.0)
                if message and message.get("type") == "message":
                    _deliver(json.loads(message["data"]))
        except Exception:  # noqa: BLE001 - the listener must outlive a Redis restart: it subscribes again
            logger.warning("revocation listener lost Redis; subscribing again", exc_info=True)
            # Whatever was published meanwhile is lost: empty the caches so nothing stale is believed.
            with _lock:
                caches = list(_caches)
            for clear in caches:
                clear()
            time.sleep(backoff)
            backoff = min(backoff * 2, 10)
