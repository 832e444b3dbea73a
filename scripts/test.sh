#!/usr/bin/env bash
# Runs the whole test suite against the real Postgres and Redis (started by `make services`).
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=chatproject.settings.test
export DATABASE_URL="${TEST_DATABASE_URL:-postgres://chat:chat@127.0.0.1:5432/chat}"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/1}"
export CELERY_BROKER_URL="${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/2}"
mkdir -p artifacts
# The engine tests load the default model from the local model cache; quick no-op once it is there.
.venv/bin/python manage.py prepare_model
# The browser tests (tests/ui) drive Debian's headless Chromium; installs it once when missing.
bash scripts/browser.sh
exec .venv/bin/pytest --create-db "$@"
