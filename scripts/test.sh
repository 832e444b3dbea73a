#!/usr/bin/env bash
# Runs the whole test suite against the real Postgres and Redis (started by `make services`).
# TEST_LANE=fast (`make test-fast`) runs only the tests that need no real engine and no live stack
# (`-m "not engine and not live"`, see pyproject.toml's markers) and skips the browser install.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/redis-env.sh
source scripts/redis-env.sh
export DJANGO_SETTINGS_MODULE=chatproject.settings.test
export DATABASE_URL="${TEST_DATABASE_URL:-postgres://chat:chat@127.0.0.1:5432/chat}"
# Redis db 1 and 2 of the local server, with its password in the URL (scripts/redis-env.sh).
export REDIS_URL="${TEST_REDIS_URL:-$(redis_url 1)}"
export CELERY_BROKER_URL="${TEST_CELERY_BROKER_URL:-$(redis_url 2)}"
mkdir -p artifacts
# The engine tests load the default model from the local model cache; quick no-op once it is there.
.venv/bin/python manage.py prepare_model
if [ "${TEST_LANE:-}" = fast ]; then
  exec .venv/bin/pytest --create-db -m "not engine and not live" "$@"
fi
# The browser tests (tests/ui) drive Debian's headless Chromium; installs it once when missing.
bash scripts/browser.sh
# The client-library test runs litellm, instructor and llama-index from their own environment.
bash scripts/clients-venv.sh
# The balancer test puts two web processes behind HAProxy (Debian's package); installs it once when missing.
bash scripts/balancer.sh
# The hosts test (tests/project/test_hosts_test.py) also needs `ip` (iproute2); installed once when missing.
HOSTS_TEST_INSTALL_ONLY=1 bash scripts/hosts-test.sh
# The TLS tests (Redis, Postgres) make a throwaway CA with openssl's command line; installed once when missing.
if ! command -v openssl >/dev/null 2>&1; then
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi
exec .venv/bin/pytest --create-db "$@"
