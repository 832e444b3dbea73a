#!/usr/bin/env bash
# One GPU worker process: the prepared default model (unless ENGINE_MODEL names another folder), then one engine
# fed by as many task threads as it has batch slots; it builds the engine before it consumes anything.
# vLLM's own Prometheus metrics (vllm:*) of its engine go on WORKER_METRICS_PORT (0 turns them off).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
$PY manage.py prepare_model
SLOTS="$($PY -c 'import django; django.setup(); from django.conf import settings; print(settings.ENGINE.max_num_seqs)')"
exec .venv/bin/celery -A chatproject worker -P threads -c "$SLOTS" -Q pro,plus,free,batch --prefetch-multiplier 1 -E \
  --hostname "${WORKER_NAME:-worker@%h}" -l info
