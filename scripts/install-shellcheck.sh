#!/usr/bin/env bash
# Install Debian's shellcheck (the static profile checks lint every shell script with it).
# Idempotent: does nothing when shellcheck is already on PATH.
set -euo pipefail
if command -v shellcheck >/dev/null 2>&1; then
    exit 0
fi
SUDO=()
[[ "$(id -u)" == 0 ]] || SUDO=(sudo)
echo "install-shellcheck: apt-get install shellcheck" >&2
"${SUDO[@]}" apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq shellcheck >/dev/null
shellcheck --version | sed -n 's/^version: /install-shellcheck: shellcheck /p' >&2
