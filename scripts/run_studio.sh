#!/usr/bin/env bash
# Starts every process a studio needs: a Celery worker, an episode host (interactive episodes: play,
# remote sessions) and the ASGI server (pages, API and websockets), in the foreground. Started twice on
# two ports against the same database and Redis, the two are front ends of one studio. The worker and
# the host are supervised: one that exits is started again (its log says when and why).
set -eu
HOST="${1:-127.0.0.1}"; PORT="${2:-8000}"
mkdir -p var

# supervise NAME COMMAND...: run COMMAND with its output in var/NAME.log, again 2 s after each exit,
# until this script stops (its TERM stops the command, which finishes what it runs first).
supervise() {
  local name=$1 child=""; shift
  trap '[ -n "$child" ] && kill "$child" 2>/dev/null; wait; exit 0' TERM INT
  while true; do
    "$@" >>"var/$name.log" 2>&1 &
    child=$!
    local status=0
    wait "$child" || status=$?
    echo "$(date -Is) supervisor: $name exited with status $status; starting it again in 2 s" >>"var/$name.log"
    sleep 2
  done
}

: >"var/worker-$PORT.log"; : >"var/episode-host-$PORT.log"
# Without -Q the worker takes the studio's own queue (settings: CELERY_QUEUE, or one derived from the database).
supervise "worker-$PORT" .venv/bin/celery -A studio worker --loglevel=INFO --concurrency="${WORKER_CONCURRENCY:-2}" \
  -n "worker-$PORT@%h" &
WORKER=$!
supervise "episode-host-$PORT" env DB_POOL_MAX_SIZE="${DB_POOL_MAX_SIZE:-10}" .venv/bin/python manage.py episode_host &
EPISODE_HOST=$!
echo
echo "  Environment Studio is running at http://$HOST:$PORT/"
echo "  Demo login: demo / demo-password   (logs: var/worker-$PORT.log, var/episode-host-$PORT.log)"
echo
DB_POOL_MAX_SIZE="${DB_POOL_MAX_SIZE:-10}" .venv/bin/uvicorn studio.asgi:application --host "$HOST" --port "$PORT" --log-level warning --ws-per-message-deflate false --no-proxy-headers &
WEB=$!
# In the background and waited for, so a TERM to this script stops all three at once.
trap 'kill $WEB $WORKER $EPISODE_HOST 2>/dev/null; wait $WEB $WORKER $EPISODE_HOST 2>/dev/null' EXIT INT TERM
wait $WEB
