#!/usr/bin/env bash
# Installs (Debian packages) and starts Postgres and Redis when they are missing or down, then makes
# sure the application's database role exists. Idempotent: safe to run before every `make` target.
set -euo pipefail

DB_USER="${DB_USER:-chat}"
DB_PASSWORD="${DB_PASSWORD:-chat}"
DB_NAME="${DB_NAME:-chat}"
REDIS_PORT="${REDIS_PORT:-6379}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

need=()
# The server itself, not just the client tools (a machine may have psql and postgresql-common only).
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "${#need[@]}" -gt 0 ]; then
  echo "services: installing ${need[*]} from Debian packages"
  apt_install "${need[@]}"
fi

# Postgres: the newest installed major version's "main" cluster.
pg_ver="$(basename "$(dirname "$(dirname "$(ls -d /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)")")")"
if ! pg_lsclusters -h | awk -v v="$pg_ver" '$1==v && $2=="main"' | grep -q .; then
  as_root pg_createcluster "$pg_ver" main >/dev/null
fi
if ! pg_lsclusters -h | awk -v v="$pg_ver" '$1==v && $2=="main" && $4=="online"' | grep -q .; then
  echo "services: starting Postgres $pg_ver"
  as_root pg_ctlcluster "$pg_ver" main start
fi
for _ in $(seq 1 30); do
  as_root su postgres -c "pg_isready -q" && break
  sleep 1
done
psql_root() { as_root su postgres -c "psql -v ON_ERROR_STOP=1 -qAt -c \"$1\""; }
if [ "$(psql_root "SELECT 1 FROM pg_roles WHERE rolname='${DB_USER}'")" != "1" ]; then
  psql_root "CREATE ROLE ${DB_USER} LOGIN CREATEDB PASSWORD '${DB_PASSWORD}'"
fi
if [ "$(psql_root "SELECT 1 FROM pg_database WHERE datname='${DB_NAME}'")" != "1" ]; then
  psql_root "CREATE DATABASE ${DB_NAME} OWNER ${DB_USER}"
fi

# Redis: a local server on REDIS_PORT.
if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  echo "services: starting Redis on port $REDIS_PORT"
  redis-server --port "$REDIS_PORT" --daemonize yes --save "" --appendonly no >/dev/null
  for _ in $(seq 1 30); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
echo "services: Postgres and Redis are up"
