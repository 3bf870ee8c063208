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
