#!/usr/bin/env bash
# Installs headless Chromium from Debian's `chromium` package for the browser tests (tests/ui), when missing.
# Playwright for Python drives it (`executable_path=/usr/bin/chromium`); `playwright install` is never used.
# Idempotent: does nothing once /usr/bin/chromium exists. Set SKIP_BROWSER_INSTALL=1 to skip.
set -euo pipefail

CHROMIUM_PATH="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ "${SKIP_BROWSER_INSTALL:-0}" = 1 ] || [ -x "$CHROMIUM_PATH" ]; then
  exit 0
fi
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
echo "browser: installing chromium from Debian packages"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
"$CHROMIUM_PATH" --version 2>/dev/null || true
