#!/usr/bin/env bash
# Install the kind CLI (KIND_VERSION of kind/node-image.env) from the Go module proxy, and the two
# host prerequisites kind's podman provider needs here (see kind/README.md, "Host patches"):
#   golang-github-containernetworking-plugin-dnsname   podman's dnsname CNI plugin, so nodes
#                                 resolve each other by name (a Recommends of podman, skipped by
#                                 --no-install-recommends)
#   /lib/modules                  kind bind-mounts it into every node; made empty when absent
# Idempotent: the binary lands in ${SOCIETY_KIND_DIR:-$HOME/.cache/society-runner/kind}/<version>/
# and is not rebuilt when there. Prints one line on stderr, the binary's path on stdout.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../kind/node-image.env
source "${REPO_ROOT}/kind/node-image.env"
die() {
    echo "install-kind: ERROR: $*" >&2
    exit 1
}
BIN_DIR="${SOCIETY_KIND_DIR:-${HOME}/.cache/society-runner/kind}/${KIND_VERSION}/bin"
start=${SECONDS}

DNSNAME=golang-github-containernetworking-plugin-dnsname
if ! dpkg-query -W -f='${Status}' "${DNSNAME}" 2>/dev/null | grep -q "install ok installed"; then
    [[ ${EUID} -eq 0 ]] || die "${DNSNAME} is missing and this is not root; install it with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq -o DPkg::Lock::Timeout=600 >/dev/null
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${DNSNAME}" >/dev/null
fi
if [[ ! -d /lib/modules ]]; then
    [[ ${EUID} -eq 0 ]] || die "/lib/modules is missing and this is not root; create it (empty)"
    mkdir -p /lib/modules
fi

if [[ -x "${BIN_DIR}/kind" ]]; then
    echo "install-kind: kind ${KIND_VERSION} cached" >&2
else
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
        export PATH="/usr/local/go/bin:${PATH}"
    fi
    command -v go >/dev/null 2>&1 || die "'go' is not on PATH; install Go >= 1.26 (https://go.dev/dl)"
    mkdir -p "${BIN_DIR}"
    tmp="$(mktemp -d "${BIN_DIR}/.build.XXXXXX")"
    GOBIN="${tmp}" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" nice -n 10 \
        go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kind@${KIND_VERSION}"
    mv "${tmp}/kind" "${BIN_DIR}/kind"
    rmdir "${tmp}"
    echo "install-kind: kind ${KIND_VERSION} built in $((SECONDS - start))s" >&2
fi
echo "${BIN_DIR}/kind"
