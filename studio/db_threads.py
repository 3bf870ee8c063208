"""Blocking database work of the ASGI side (websockets, remote session steps, the OpenEnv and MCP
routes) on thread pools of its own, instead of Channels' one database thread.

`database_sync_to_async` runs every call of a process on that one thread, in turn: 200 viewers
joining at once waited there for each other's queries (each a round trip to PostgreSQL, the thread
mostly idle meanwhile) and for every chunk of stored steps being read, and the median viewer saw its
first steps after a second (bench/bench_viewers.py). On a pool the round trips overlap.

`in_pool` runs a call through `run_in_executor`, so it runs in the pool thread's own context (unlike
asgiref's `thread_sensitive=False`, which carries the caller's context, and a connection opened by
another thread with it, which Django refuses): a connection is only ever used by the thread that
opened it. It is handed back after each call (closed, or returned to the pool when DB_POOL_MAX_SIZE is
set), so the pool's threads do not each hold one open. `read_async` is the websockets' pool, for reads
only: nothing there may rely on running in order with the caller's other database work.
"""
import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from django.db import connection

READ_THREADS = 4

_reads = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="db-read")


def _returning_connection(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    finally:
        if connection.connection is not None:
            connection.close()


async def in_pool(pool: ThreadPoolExecutor, function, /, *args, **kwargs):
    """`function(*args, **kwargs)` (blocking: the database, an episode host) on one of `pool`'s threads;
    its result. The thread's database connection is handed back afterwards."""
    call = functools.partial(_returning_connection, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool, call)


async def read_async(function, /, *args, **kwargs):
    """A database read of the websockets on their own threads (READ_THREADS of them)."""
    return await in_pool(_reads, function, *args, **kwargs)
