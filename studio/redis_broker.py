"""The Celery broker transport: kombu's Redis transport, made to survive a Redis restart.

When Redis goes away, Celery 5.7's consumer closes the broken connection twice: the first close
(inside `collect`) fails on the dead socket before the default channel is marked closed, and drops the
transport's client; the second close then asks the channel for connection parameters it no longer
has, and the AttributeError that follows is not a connection error, so the worker's main process
exits ("Unrecoverable error: AttributeError: 'NoneType' object has no attribute 'hostname'").
Here a channel whose transport lost its client says so with redis' ConnectionError, which the
consumer's close ignores as it should, and the consumer reconnects (settings: CELERY_BROKER_TRANSPORT).
"""
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous=False):
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection was closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
