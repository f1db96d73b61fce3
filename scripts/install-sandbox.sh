#!/usr/bin/env bash
# Idempotent install of what the local profile's agent sandboxes use: bubblewrap (Debian's `bwrap`)
# and libseccomp's Python bindings (Debian's python3-seccomp), which compile the seccomp filter.
set -euo pipefail
have_seccomp() {
  for python in /usr/bin/python3 "$(command -v python3 || true)"; do
    if [ -x "$python" ] && "$python" -I -c "import seccomp" >/dev/null 2>&1; then
      return 0
    fi
  done
  return 1
}
if command -v bwrap >/dev/null 2>&1 && have_seccomp; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-sandbox: bubblewrap or libseccomp's Python bindings are missing; install them" \
    "(Debian/Ubuntu: sudo apt-get install bubblewrap python3-seccomp; Fedora: sudo dnf install" \
    "bubblewrap python3-libseccomp), or run with --unsandboxed" >&2
  exit 0
fi
echo "install-sandbox: installing bubblewrap and python3-seccomp" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends bubblewrap \
  python3-seccomp >/dev/null
