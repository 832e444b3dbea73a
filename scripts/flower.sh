#!/usr/bin/env bash
# Starts Flower (Celery's monitor) behind HTTP basic auth, always: it shows every task and its arguments, and
# can shut workers down. FLOWER_BASIC_AUTH=user:password is required (`make run` generates one); FLOWER_ADDRESS
# (default 127.0.0.1) and FLOWER_PORT (default 5555) choose where it listens.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${FLOWER_BASIC_AUTH:-}" != ?*:?* ]]; then
  echo "flower: set FLOWER_BASIC_AUTH=user:password (Flower is never started without authentication)" >&2
  exit 2
fi
CELERY="${CELERY_BIN:-.venv/bin/celery}"
export FLOWER_BASIC_AUTH
exec "$CELERY" -A chatproject flower --address="${FLOWER_ADDRESS:-127.0.0.1}" --port="${FLOWER_PORT:-5555}" \
  --url_prefix="${FLOWER_URL_PREFIX:-}"
