#!/usr/bin/env bash
# Creates .venv (VENV to use another folder) with everything the system and its tests need, from the locks in
# requirements/lock/ (`make lock` writes them from requirements/*.txt). Idempotent and quick when nothing changed.
# ENGINE=cpu|gpu|none overrides the automatic choice (gpu when nvidia-smi sees a GPU); none: no engine (dev.txt).
# ENGINE=cpu takes torch's CPU build from pip's configured sources (find-links, indexes) or TORCH_INDEX_URL.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
STAMP="$VENV/.bootstrap-stamp"
if [ -z "${ENGINE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then ENGINE=gpu; else ENGINE=cpu; fi
fi
case "$ENGINE" in
  cpu | gpu) LOCK="requirements/lock/$ENGINE.txt" ;;
  none) LOCK=requirements/lock/dev.txt ;;
  *) echo "ENGINE must be cpu, gpu or none" >&2; exit 2 ;;
esac
want="$(cat requirements/lock/*.txt | sha256sum | cut -c1-16)-$ENGINE"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then exit 0; fi

if [ ! -x "$VENV/bin/python" ]; then
  # A bare Debian may lack Python's venv module (Debian splits it out): install it from Debian packages.
  if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c "import ensurepip, venv" >/dev/null 2>&1; then
    as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
    echo "bootstrap: installing python3, python3-venv and python3-dev from Debian packages"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-dev >/dev/null
  fi
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "bootstrap: the locks are for CPython 3.11 and $VENV has $("$VENV/bin/python" -V 2>&1):" \
    "remove $VENV and set PYTHON to a Python 3.11" >&2
  exit 2
fi
PIP=("$VENV/bin/python" -m pip)
# The lock lists every package with its hashes: --no-deps installs exactly that list (pip resolves nothing) and
# --require-hashes checks every file. pip itself first, at the locked version.
"${PIP[@]}" install -q --require-hashes --no-deps -r <(awk '/^pip==/ {p = 1} p {print; if (!/\\$/) exit}' "$LOCK")
if [ "$ENGINE" = cpu ]; then
  # torch's CPU build is not on PyPI: exact version, no hash (requirements/lock/cpu-torch.txt says why).
  if ! "${PIP[@]}" install -q --no-deps ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
    -r requirements/lock/cpu-torch.txt; then
    echo "bootstrap: $(grep '^torch==' requirements/lock/cpu-torch.txt) is not on PyPI: give pip a find-links" \
      "folder holding the wheel or set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" >&2
    exit 1
  fi
fi
"${PIP[@]}" install -q --require-hashes --no-deps -r "$LOCK"
if [ "$ENGINE" = cpu ]; then
  # The CPU lock leaves out PyPI's torchvision/torchaudio/torchcodec (CUDA builds that break transformers on a CPU
  # torch); remove them from a venv that had them (an older bootstrap, or ENGINE=gpu before).
  "${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
echo "$want" > "$STAMP"
echo "bootstrap: $VENV ready (engine: $ENGINE, from $LOCK)"
