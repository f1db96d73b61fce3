#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests (the replay page and the live view), once.
# Playwright drives it with executable_path=/usr/bin/chromium; Playwright's own browser download
# cannot work on a machine that reaches only the package registries. Idempotent: does nothing
# when /usr/bin/chromium already runs.
set -euo pipefail

if /usr/bin/chromium --version >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-browser: /usr/bin/chromium is missing; run as root (or: sudo apt-get install chromium)" >&2
  exit 1
fi
echo "install-browser: installing Debian's chromium" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
/usr/bin/chromium --version >&2
