#!/usr/bin/env bash
# Idempotent install of bubblewrap (Debian's `bwrap`), which the local profile's agent sandboxes use.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-sandbox: bubblewrap is missing; install it (Debian/Ubuntu: sudo apt-get install" \
    "bubblewrap; Fedora: sudo dnf install bubblewrap), or run with --unsandboxed" >&2
  exit 0
fi
echo "install-sandbox: installing bubblewrap" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends bubblewrap >/dev/null
