#!/usr/bin/env bash
# Starts the whole system in the foreground (after `make migrate`): web, dispatcher and worker.
# Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-chatproject.settings.base}"
PORT="${PORT:-8000}"
PY=.venv/bin/python
# The local Redis wants the checkout's password (scripts/services.sh): every process gets it in its URL.
# shellcheck source=scripts/redis-env.sh
source scripts/redis-env.sh
export REDIS_URL="${REDIS_URL:-$(redis_url 0)}"
export CELERY_BROKER_URL="${CELERY_BROKER_URL:-$REDIS_URL}"

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

# The GPU worker: one engine (the prepared default model unless ENGINE_MODEL names another folder) fed by
# as many task threads as it has batch slots; it builds the engine before it consumes anything.
$PY manage.py prepare_model
SLOTS="$($PY -c 'import django; django.setup(); from django.conf import settings; print(settings.ENGINE.max_num_seqs)')"
# vLLM's own Prometheus metrics (vllm:*) of this worker's engine on WORKER_METRICS_PORT (9101; 0 turns it off).
WORKER_METRICS_PORT="${WORKER_METRICS_PORT:-9101}" \
  .venv/bin/celery -A chatproject worker -P threads -c "$SLOTS" -Q pro,plus,free,batch --prefetch-multiplier 1 -E \
  --hostname "worker@%h" -l info &
pids+=($!)
# The fair scheduler: moves admitted runs into the Celery tier queues while the engines have room; its
# housekeeping also requeues (or fails) runs whose worker died mid-stream, so none stays streaming forever.
$PY manage.py run_dispatcher &
pids+=($!)

echo "web: http://127.0.0.1:$PORT  (API docs: http://127.0.0.1:$PORT/api/docs/)"
echo "Prometheus: http://127.0.0.1:$PORT/metrics (system)  http://127.0.0.1:${WORKER_METRICS_PORT:-9101}/metrics (vLLM)"
wait -n
