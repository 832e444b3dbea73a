#!/usr/bin/env bash
# Starts the whole system in the foreground (after `make migrate`): web, worker, dispatcher and Flower, under
# supervisord (deploy/supervisord.conf), which restarts any of them that dies and keeps the others running.
# Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-chatproject.settings.base}"
export PORT="${PORT:-8000}"
# vLLM's own Prometheus metrics (vllm:*) of the worker's engine (0 turns them off).
export WORKER_METRICS_PORT="${WORKER_METRICS_PORT:-9101}"
export FLOWER_PORT="${FLOWER_PORT:-5555}"
export SUPERVISOR_RUN_DIR="${SUPERVISOR_RUN_DIR:-$PWD/var}"
PY=.venv/bin/python
# The local Redis wants the checkout's password (scripts/services.sh): every process gets it in its URL.
# shellcheck source=scripts/redis-env.sh
source scripts/redis-env.sh
export REDIS_URL="${REDIS_URL:-$(redis_url 0)}"
export CELERY_BROKER_URL="${CELERY_BROKER_URL:-$REDIS_URL}"

$PY manage.py create_demo_users

# Flower behind basic auth: a password generated once per checkout (var/flower-password), unless
# FLOWER_BASIC_AUTH=user:password is given.
mkdir -p var
if [ -z "${FLOWER_BASIC_AUTH:-}" ]; then
  if [ ! -s var/flower-password ]; then
    (umask 077; $PY -c 'import secrets; print(secrets.token_urlsafe(18))' > var/flower-password)
  fi
  FLOWER_BASIC_AUTH="admin:$(cat var/flower-password)"
fi
export FLOWER_BASIC_AUTH

.venv/bin/supervisord -c deploy/supervisord.conf &
supervisor=$!
stop() {
  trap - INT TERM EXIT
  echo "stopping..."
  kill -TERM "$supervisor" 2>/dev/null || true
  wait "$supervisor" 2>/dev/null || true
}
trap stop INT TERM EXIT

echo "starting: web http://127.0.0.1:$PORT (prompts are answered 503 until the model is ready)"
# "ready" only once a worker has heartbeated: its engine is built and it consumes the tier queues.
(
  until $PY - "$PORT" <<'PYEOF' 2>/dev/null; do sleep 1; done
import json, sys, urllib.request
try:
    body = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2))
except Exception:
    sys.exit(1)
sys.exit(0 if body["status"] == "ready" and (body.get("workers_ready") or 0) > 0 else 1)
PYEOF
  echo "ready: http://127.0.0.1:$PORT  (API docs: http://127.0.0.1:$PORT/api/docs/)"
  echo "Prometheus: http://127.0.0.1:$PORT/metrics (system)  http://127.0.0.1:$WORKER_METRICS_PORT/metrics (vLLM)"
  echo "Flower: http://127.0.0.1:$FLOWER_PORT  (user ${FLOWER_BASIC_AUTH%%:*}, password ${FLOWER_BASIC_AUTH#*:})"
  echo "processes: SUPERVISOR_RUN_DIR=$SUPERVISOR_RUN_DIR .venv/bin/supervisorctl -c deploy/supervisord.conf status"
) &
wait "$supervisor"
