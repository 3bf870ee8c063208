"""The episode data plane: a message for an episode host goes straight over the host's own connection
when it announced an address (direct.py), else through Redis lists (routing.py). The one place that
chooses; interactive.py sends through here."""
from django.conf import settings

from . import direct
from .routing import acall_via_redis, ahost_address, call_via_redis, host_address, unwrap


def direct_enabled() -> bool:
    return bool(getattr(settings, "EPISODE_HOST_DIRECT", True))


def call(*, message: dict, host_id: str | None, timeout_s: float) -> dict:
    """Send `message` to `host_id` (None: to whichever host takes the next start) and wait for its
    reply: straight over the host's connection when it announced an address, else through Redis.
    Raises HostUnavailable when the host is gone (or none runs), HostError for refusals,
    RedisUnavailable when Redis fails."""
    if host_id is not None and direct_enabled():
        address = host_address(host_id)
        if address is not None:
            try:
                return unwrap(direct.request(host_id, address, message, timeout_s))
            except direct.Unreachable:
                pass  # nothing was sent: through Redis, which also tells whether the host is alive
    return call_via_redis(message=message, host_id=host_id, timeout_s=timeout_s)


async def acall(*, message: dict, host_id: str, timeout_s: float) -> dict:
    """`call` to a known host, awaited on the event loop instead of blocking a thread (direct when
    the host announced an address: read and written on this loop, no thread)."""
    if direct_enabled():
        address = await ahost_address(host_id)
        if address is not None:
            try:
                return unwrap(await direct.arequest(host_id, address, message, timeout_s))
            except direct.Unreachable:
                pass
    return await acall_via_redis(message=message, host_id=host_id, timeout_s=timeout_s)
