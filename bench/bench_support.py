"""What the benchmarks share: a percentile and a bench database created and migrated if missing."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def prepare_database(url: str) -> None:
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            conn.execute(f'create database "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env={**os.environ, "DATABASE_URL": url}, check=True)


class DatabaseRoundTrips:
    """Counts what this process sends PostgreSQL, in every thread: statements, transactions (psycopg
    sends BEGIN and COMMIT as round trips of their own) and new connections (each a handshake plus
    authentication). `round_trips` adds them up, counting a new connection as one."""

    def __init__(self):
        self.statements = self.transactions = self.connections = 0

    @property
    def round_trips(self) -> int:
        return self.statements + 2 * self.transactions + self.connections

    def __enter__(self):
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.db.backends.signals import connection_created
        from django.db.backends.utils import CursorWrapper

        counter = self
        self._patched = [(CursorWrapper, "execute"), (CursorWrapper, "executemany"), (BaseDatabaseWrapper, "_commit"),
                         (BaseDatabaseWrapper, "_rollback")]
        self._originals = [getattr(owner, name) for owner, name in self._patched]
        execute, executemany, commit, rollback = self._originals

        def counted_execute(cursor, *args, **kwargs):
            counter.statements += 1
            return execute(cursor, *args, **kwargs)

        def counted_executemany(cursor, *args, **kwargs):
            counter.statements += 1
            return executemany(cursor, *args, **kwargs)

        def counted_commit(wrapper):
            if wrapper.connection is not None and not wrapper.get_autocommit():
                counter.transactions += 1
            return commit(wrapper)

        def counted_rollback(wrapper):
            if wrapper.connection is not None and not wrapper.get_autocommit():
                counter.transactions += 1
            return rollback(wrapper)

        for (owner, name), patched in zip(self._patched, (counted_execute, counted_executemany, counted_commit, counted_rollback)):
            setattr(owner, name, patched)
        self._on_connect = lambda **kwargs: setattr(counter, "connections", counter.connections + 1)
        connection_created.connect(self._on_connect, weak=False)
        return self

    def __exit__(self, *exc_info):
        from django.db.backends.signals import connection_created

        for (owner, name), original in zip(self._patched, self._originals):
            setattr(owner, name, original)
        connection_created.disconnect(self._on_connect)
