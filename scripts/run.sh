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

# Flower on 127.0.0.1:5555, behind basic auth: a password generated once per checkout (var/flower-password),
# unless FLOWER_BASIC_AUTH=user:password is given.
if [ -z "${FLOWER_BASIC_AUTH:-}" ]; then
  mkdir -p var
  if [ ! -s var/flower-password ]; then
    (umask 077; $PY -c 'import secrets; print(secrets.token_urlsafe(18))' > var/flower-password)
  fi
  FLOWER_BASIC_AUTH="admin:$(cat var/flower-password)"
fi
FLOWER_BASIC_AUTH="$FLOWER_BASIC_AUTH" bash scripts/flower.sh >/dev/null 2>&1 &
pids+=($!)

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
  echo "Prometheus: http://127.0.0.1:$PORT/metrics (system)  http://127.0.0.1:${WORKER_METRICS_PORT:-9101}/metrics (vLLM)"
  echo "Flower: http://127.0.0.1:${FLOWER_PORT:-5555}  (user ${FLOWER_BASIC_AUTH%%:*}, password ${FLOWER_BASIC_AUTH#*:})"
) &
# Any of the services ending stops the rest (the readiness printer above ending is not one of them).
wait -n "${pids[@]}"
