#!/usr/bin/env bash
# Creates .venv-clients (CLIENTS_VENV to use another folder) from requirements/lock/clients.txt: the client
# libraries (litellm, instructor, llama-index's OpenAILike) that tests/openai_engine/test_client_libraries_engine.py
# runs against the live stack. Their own environment, since their openai pins conflict with .venv's
# (requirements/clients.txt). Idempotent and quick when the lock is unchanged. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV="${CLIENTS_VENV:-.venv-clients}"
LOCK=requirements/lock/clients.txt
STAMP="$VENV/.clients-stamp"
want="$(sha256sum "$LOCK" | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then exit 0; fi
# scripts/bootstrap.sh has made sure this Python has its venv module.
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --require-hashes --no-deps -r <(awk '/^pip==/ {p = 1} p {print; if (!/\\$/) exit}' "$LOCK")
"${PIP[@]}" install -q --require-hashes --no-deps -r "$LOCK"
echo "$want" >"$STAMP"
echo "clients-venv: $VENV ready (from $LOCK)"
