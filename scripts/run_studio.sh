#!/usr/bin/env bash
# Starts a Celery worker and the ASGI server (pages, API and websockets) in the foreground.
set -eu
HOST="${1:-127.0.0.1}"; PORT="${2:-8000}"
mkdir -p var
.venv/bin/celery -A studio worker --loglevel=INFO --concurrency="${WORKER_CONCURRENCY:-2}" -Q "${CELERY_QUEUE:-studio}" >var/worker.log 2>&1 &
WORKER=$!
trap 'kill $WORKER 2>/dev/null; wait $WORKER 2>/dev/null' EXIT INT TERM
echo
echo "  Environment Studio is running at http://$HOST:$PORT/"
echo "  Demo login: demo / demo-password   (worker log: var/worker.log)"
echo
.venv/bin/uvicorn studio.asgi:application --host "$HOST" --port "$PORT" --log-level warning --ws-per-message-deflate false
