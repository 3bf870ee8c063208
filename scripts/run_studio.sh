#!/usr/bin/env bash
# Starts every process a studio needs: a Celery worker, an episode host (interactive episodes: play,
# remote sessions) and the ASGI server (pages, API and websockets), in the foreground. Started twice on
# two ports against the same database and Redis, the two are front ends of one studio.
set -eu
HOST="${1:-127.0.0.1}"; PORT="${2:-8000}"
mkdir -p var
# Without -Q the worker takes the studio's own queue (settings: CELERY_QUEUE, or one derived from the database).
.venv/bin/celery -A studio worker --loglevel=INFO --concurrency="${WORKER_CONCURRENCY:-2}" \
  -n "worker-$PORT@%h" >"var/worker-$PORT.log" 2>&1 &
WORKER=$!
DB_POOL_MAX_SIZE="${DB_POOL_MAX_SIZE:-10}" .venv/bin/python manage.py episode_host >"var/episode-host-$PORT.log" 2>&1 &
EPISODE_HOST=$!
trap 'kill $WORKER $EPISODE_HOST 2>/dev/null; wait $WORKER $EPISODE_HOST 2>/dev/null' EXIT INT TERM
echo
echo "  Environment Studio is running at http://$HOST:$PORT/"
echo "  Demo login: demo / demo-password   (logs: var/worker-$PORT.log, var/episode-host-$PORT.log)"
echo
DB_POOL_MAX_SIZE="${DB_POOL_MAX_SIZE:-10}" .venv/bin/uvicorn studio.asgi:application --host "$HOST" --port "$PORT" --log-level warning --ws-per-message-deflate false --no-proxy-headers
