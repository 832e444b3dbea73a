# Sourced (not run) by services.sh, run.sh and test.sh from the repository root: the local Redis's port, its
# password and URLs that carry it.
#
# REDIS_PASSWORD comes from the environment, else from var/redis-password, which the first call creates (random,
# mode 600) and every later one reuses: one password per checkout. Every process reads its Redis URL
# (REDIS_URL, CELERY_BROKER_URL) from the environment; redis_url builds one with the password in it.

REDIS_PORT="${REDIS_PORT:-6379}"
REDIS_PASSWORD_FILE="${REDIS_PASSWORD_FILE:-var/redis-password}"

# Prints the password (REDIS_PASSWORD, else the checkout's file, created on first use).
redis_password() {
  if [ -n "${REDIS_PASSWORD:-}" ]; then
    printf '%s' "$REDIS_PASSWORD"
    return
  fi
  if [ ! -s "$REDIS_PASSWORD_FILE" ]; then
    mkdir -p "$(dirname "$REDIS_PASSWORD_FILE")"
    # 32 random bytes as hex: nothing in it needs quoting in a URL or a config file.
    (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$REDIS_PASSWORD_FILE.tmp")
    mv -f "$REDIS_PASSWORD_FILE.tmp" "$REDIS_PASSWORD_FILE"
  fi
  chmod 600 "$REDIS_PASSWORD_FILE"
  tr -d '\n' <"$REDIS_PASSWORD_FILE"
}

# Percent-encodes $1 for the userinfo part of a URL (a REDIS_PASSWORD of the operator's choosing may need it).
redis_urlencode() {
  local LC_ALL=C s="$1" out="" c i
  for ((i = 0; i < ${#s}; i++)); do
    c="${s:i:1}"
    case "$c" in
      [A-Za-z0-9._~-]) out+="$c" ;;
      *) printf -v c '%%%02X' "'$c"; out+="$c" ;;
    esac
  done
  printf '%s' "$out"
}

# What answers on REDIS_PORT: "auth" (our password works), "open" (no password asked: a server started before
# passwords were the default), "wrongpass" (it wants another password) or "down".
redis_state() {
  local reply
  reply="$(env -u REDISCLI_AUTH redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>&1 || true)"
  case "$reply" in
    PONG) echo open; return ;;
    *NOAUTH*) ;;
    *) echo down; return ;;
  esac
  reply="$(REDISCLI_AUTH="$(redis_password)" redis-cli --no-auth-warning -h 127.0.0.1 -p "$REDIS_PORT" ping 2>&1 || true)"
  if [ "$reply" = PONG ]; then echo auth; else echo wrongpass; fi
}

# Prints redis://:<password>@127.0.0.1:<port>/<db $1>; without the password when the server asks for none.
redis_url() {
  if [ "$(redis_state)" = open ]; then
    printf 'redis://127.0.0.1:%s/%s' "$REDIS_PORT" "$1"
  else
    printf 'redis://:%s@127.0.0.1:%s/%s' "$(redis_urlencode "$(redis_password)")" "$REDIS_PORT" "$1"
  fi
}
