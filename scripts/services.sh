#!/usr/bin/env bash
# Installs (Debian packages) and starts Postgres and Redis when they are missing or down, then makes
# sure the application's database role exists. Idempotent: safe to run before every `make` target.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/redis-env.sh
source scripts/redis-env.sh

DB_USER="${DB_USER:-chat}"
DB_PASSWORD="${DB_PASSWORD:-chat}"
DB_NAME="${DB_NAME:-chat}"

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
if [[ " ${need[*]} " == *" redis-server "* ]]; then
  # Debian's package may have started its own server (no password) on 6379: the one started below replaces it.
  if [ -d /run/systemd/system ]; then
    as_root systemctl disable --now redis-server >/dev/null 2>&1 || true
  else
    as_root service redis-server stop >/dev/null 2>&1 || true
  fi
  if [ "$(redis_state)" = open ]; then redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true; fi
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

# Redis: a local server on REDIS_PORT, on loopback only, that wants the checkout's password (REDIS_PASSWORD or
# var/redis-password, see scripts/redis-env.sh) and keeps its data in an append-only file under var/redis/.
redis_dir="${REDIS_DIR:-$PWD/var/redis/$REDIS_PORT}"
case "$(redis_state)" in
  auth) ;;
  open)
    echo "services: WARNING: the Redis on port $REDIS_PORT asks for no password (it was started before passwords" \
      "were the default); using it as it is. Stop it (redis-cli -p $REDIS_PORT shutdown) and run this again to" \
      "get one on loopback with a password and an append-only file." >&2 ;;
  wrongpass)
    echo "services: the Redis on port $REDIS_PORT wants another password than REDIS_PASSWORD or" \
      "$REDIS_PASSWORD_FILE holds; set REDIS_PASSWORD to its password, or stop it" >&2
    exit 1 ;;
  down)
    echo "services: starting Redis on 127.0.0.1:$REDIS_PORT (password, append-only file in $redis_dir)"
    mkdir -p "$redis_dir"
    chmod 700 "$redis_dir"
    # The password goes in a config file only this user can read, not on the command line (ps shows that).
    # Quoted as redis.conf reads strings: backslashes and double quotes escaped.
    redis_pw="$(redis_password)"
    redis_pw="${redis_pw//\\/\\\\}"
    redis_pw="${redis_pw//\"/\\\"}"
    (
      umask 077
      cat >"$redis_dir/redis.conf" <<EOF
port $REDIS_PORT
bind 127.0.0.1 -::1
protected-mode yes
requirepass "$redis_pw"
dir "$redis_dir"
appendonly yes
appendfsync everysec
save ""
daemonize yes
pidfile "$redis_dir/redis.pid"
logfile "$redis_dir/redis.log"
EOF
    )
    unset redis_pw
    redis-server "$redis_dir/redis.conf"
    for _ in $(seq 1 50); do [ "$(redis_state)" = auth ] && break; sleep 0.2; done
    if [ "$(redis_state)" != auth ]; then
      echo "services: Redis did not come up on port $REDIS_PORT; see $redis_dir/redis.log" >&2
      exit 1
    fi ;;
esac
echo "services: Postgres and Redis are up"
