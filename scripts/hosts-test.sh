#!/usr/bin/env bash
# `make hosts-test`: the product across Linux network namespaces (bench/hosts_test.py, docs/hosts-test.md).
# Installs what it needs when missing (HAProxy from Debian through scripts/balancer.sh, iproute2 for `ip netns`),
# then runs the test with the arguments given (`make hosts-test ARGS="--quick"`). Needs root (network namespaces).
# HOSTS_TEST_INSTALL_ONLY=1: install, run nothing (scripts/test.sh, before the suite's own hosts test).
set -euo pipefail
cd "$(dirname "$0")/.."
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
bash scripts/balancer.sh
if ! command -v ip >/dev/null 2>&1; then
  echo "hosts-test: installing iproute2 from Debian packages"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null ||
    { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null; }
fi
if [ "${HOSTS_TEST_INSTALL_ONLY:-0}" = 1 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  exec sudo -E .venv/bin/python bench/hosts_test.py "$@"
fi
exec .venv/bin/python bench/hosts_test.py "$@"
