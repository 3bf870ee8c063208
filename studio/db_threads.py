"""Read-only database work of websockets (who is connecting, may they see it, the stored steps they
are owed) on a few threads of its own, instead of Channels' one database thread.

`database_sync_to_async` runs every call of a process on that one thread, in turn: 200 viewers
joining at once waited there for each other's queries (each a round trip to PostgreSQL, the thread
mostly idle meanwhile) and for every chunk of stored steps being read, and the median viewer saw its
first steps after a second (bench/bench_viewers.py). Here READ_THREADS threads take them, so the
round trips overlap.

Each thread runs its calls in a context of its own, kept for the thread's life: Django's connection
lives in that context, so a connection is only ever used by the thread that opened it (asgiref
carries a caller's context, and the connection in it, into whichever thread runs a
`thread_sensitive=False` call, which Django refuses). Connections are closed or kept after each call
as Django's settings say (CONN_MAX_AGE, or returned to the pool), as `database_sync_to_async` does.
Only for reads: nothing here may rely on running in order with the caller's other database work.
"""
import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections

READ_THREADS = 4

_executor = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="db-read")
_thread = threading.local()


def _run(fn, args, kwargs):
    context = getattr(_thread, "context", None)
    if context is None:
        context = _thread.context = contextvars.Context()
    return context.run(_call, fn, args, kwargs)


def _call(fn, args, kwargs):
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()


async def read_async(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` (a database read) on one of the read threads; its result."""
    return await asyncio.get_running_loop().run_in_executor(_executor, _run, fn, args, kwargs)
