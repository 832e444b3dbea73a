#!/usr/bin/env bash
# Installs HAProxy from Debian's `haproxy` package for the balancer test (tests/runs/test_stream_balancer.py: two
# web processes behind it, one killed mid-stream), when missing. The test runs its own haproxy process with a
# config of its own; the package's service is never started. Idempotent. Set SKIP_BALANCER_INSTALL=1 to skip.
set -euo pipefail

if [ "${SKIP_BALANCER_INSTALL:-0}" = 1 ] || command -v haproxy >/dev/null 2>&1; then
  exit 0
fi
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
echo "balancer: installing haproxy from Debian packages"
# Debian's maintainer scripts would start the packaged service: policy-rc.d says no, as in containers.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
  as_root chmod 755 /usr/sbin/policy-rc.d
  trap 'as_root rm -f /usr/sbin/policy-rc.d' EXIT
fi
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null ||
  { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; }
haproxy -v | head -1
