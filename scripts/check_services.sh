#!/usr/bin/env bash
# Says clearly when PostgreSQL or Redis is not reachable, and how to start it.
set -u
DB_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/studio}"
REDIS="${REDIS_URL:-redis://127.0.0.1:6379/0}"
ok=1
if ! .venv/bin/python - "$DB_URL" <<'PY' 2>/dev/null
import sys, dj_database_url, psycopg
c = dj_database_url.parse(sys.argv[1])
psycopg.connect(host=c["HOST"] or "127.0.0.1", port=c["PORT"] or 5432, user=c["USER"], password=c["PASSWORD"] or None, dbname="postgres", connect_timeout=3).close()
PY
then
  echo "PostgreSQL is not reachable at $DB_URL." >&2
  echo "  Start it:  pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start" >&2
  echo "  or bring everything up with:  docker compose up" >&2
  ok=0
fi
if ! .venv/bin/python -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_connect_timeout=3).ping()" "$REDIS" 2>/dev/null; then
  echo "Redis is not reachable at $REDIS." >&2
  echo "  Start it:  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no" >&2
  echo "  or bring everything up with:  docker compose up" >&2
  ok=0
fi
[ $ok = 1 ] || exit 1
# Create the studio database on first run (the test database is created by pytest).
.venv/bin/python - "$DB_URL" <<'PY'
import sys, dj_database_url, psycopg
c = dj_database_url.parse(sys.argv[1])
with psycopg.connect(host=c["HOST"] or "127.0.0.1", port=c["PORT"] or 5432, user=c["USER"], password=c["PASSWORD"] or None, dbname="postgres", autocommit=True) as conn:
    if not conn.execute("select 1 from pg_database where datname=%s", (c["NAME"],)).fetchone():
        conn.execute(f'create database "{c["NAME"]}"')
        print(f"created database {c['NAME']}")
PY
