#!/usr/bin/env bash
# Starts the whole system in the foreground (after `make migrate`): web, dispatcher and worker.
# Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-chatproject.settings.base}"
PORT="${PORT:-8000}"
PY=.venv/bin/python

$PY manage.py create_demo_users

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo "stopping..."
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

.venv/bin/uvicorn chatproject.asgi:application --host 127.0.0.1 --port "$PORT" --log-level info &
pids+=($!)

# The fair scheduler: moves admitted runs into the Celery tier queues while the engines have room.
$PY manage.py run_dispatcher &
pids+=($!)

echo "web: http://127.0.0.1:$PORT  (API docs: http://127.0.0.1:$PORT/api/docs/)"
wait -n
