#!/usr/bin/env bash
# Build the local Kubernetes control plane used by tests/kubernetes from the Go
# module proxy: etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
# kwok, the Kueue manager and the Agent Sandbox controller, plus the CRDs and
# webhook manifests they need.
#
# Idempotent: everything lands in
#   ${SOCIETY_CONTROL_PLANE_DIR:-$HOME/.cache/society-runner/control-plane}/<hash of kind/versions.env>/
# with bin/ and manifests/ inside; whatever is already there is skipped.
# The Go module and build caches stay in their default places.
#
# Usage: scripts/build-control-plane.sh [--print-dir]
#   --print-dir   print the output directory and exit (builds nothing)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSIONS_FILE="${REPO_ROOT}/kind/versions.env"

die() {
    echo "build-control-plane: ERROR: $*" >&2
    exit 1
}
log() { echo "build-control-plane: $*" >&2; }

[[ -f "${VERSIONS_FILE}" ]] || die "missing ${VERSIONS_FILE}"
# shellcheck source=../kind/versions.env
source "${VERSIONS_FILE}"
for var in KUBERNETES_VERSION ETCD_VERSION KWOK_VERSION KUEUE_VERSION AGENT_SANDBOX_VERSION; do
    [[ -n "${!var:-}" ]] || die "${var} is not set in ${VERSIONS_FILE}"
done

VERSIONS_HASH="$(sha256sum "${VERSIONS_FILE}" | cut -c1-16)"
OUT_DIR="${SOCIETY_CONTROL_PLANE_DIR:-${HOME}/.cache/society-runner/control-plane}/${VERSIONS_HASH}"
BIN_DIR="${OUT_DIR}/bin"
MANIFEST_DIR="${OUT_DIR}/manifests"
SRC_DIR="${OUT_DIR}/src"

if [[ "${1:-}" == "--print-dir" ]]; then
    echo "${OUT_DIR}"
    exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:${PATH}"
fi
command -v go >/dev/null 2>&1 || die "'go' is not on PATH; install Go >= 1.26 (https://go.dev/dl) and retry"

mkdir -p "${BIN_DIR}" "${MANIFEST_DIR}" "${SRC_DIR}"

# One build at a time per output directory (parallel test sessions share it).
exec 9>"${OUT_DIR}/.lock"
if ! flock -n 9; then
    log "another build holds ${OUT_DIR}/.lock; waiting"
    flock 9
fi

# Be a good neighbour on a 2-core machine; the caller may override parallelism.
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
GO_PARALLEL="${CONTROL_PLANE_GO_PARALLEL:-2}"
GO=(nice -n 10 go)
GO_BUILD_FLAGS=(-p "${GO_PARALLEL}" -trimpath)
# agent-sandbox releases are not in the public checksum database; everything
# else is verified as usual.
export GONOSUMDB="${GONOSUMDB:+${GONOSUMDB},}sigs.k8s.io/agent-sandbox"

START_ALL=${SECONDS}
log "versions: kubernetes ${KUBERNETES_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}, kueue ${KUEUE_VERSION}, agent-sandbox ${AGENT_SANDBOX_VERSION}"
log "output: ${OUT_DIR} (Go tool output: ${OUT_DIR}/build.log)"

have() { [[ -x "${BIN_DIR}/$1" ]]; }

# step NAME CMD... : run CMD with timing; any failing command inside fails the
# whole script through the ERR trap (errexit alone is ignored inside `if`/`||`).
CURRENT_STEP=""
# The Go tool's own output (module downloads, compiler chatter) goes to BUILD_LOG; the terminal
# gets one line per component with its time, and the log's tail if a step fails.
BUILD_LOG="${OUT_DIR}/build.log"
: >"${BUILD_LOG}"
exec 3>&2 # the terminal, also from inside a step whose output goes to the log
trap 'if [[ "${BASHPID}" == "$$" && -n "${CURRENT_STEP}" ]]; then { echo; tail -n 30 "${BUILD_LOG}"; echo "build-control-plane: ERROR: building ${CURRENT_STEP} failed; the whole Go output is in ${BUILD_LOG}"; } >&3; CURRENT_STEP=""; fi; exit 1' ERR
set -E
step() {
    CURRENT_STEP="$1"
    shift
    local t0=${SECONDS}
    printf 'build-control-plane: %s ... ' "${CURRENT_STEP}" >&2
    echo "=== ${CURRENT_STEP}" >>"${BUILD_LOG}"
    "$@" >>"${BUILD_LOG}" 2>&1
    echo "built in $((SECONDS - t0))s" >&2
    CURRENT_STEP=""
}

# --- etcd: wrapper module around go.etcd.io/etcd/server/v3/etcdmain ---------
build_etcd() {
    local dir="${SRC_DIR}/etcd"
    rm -rf "${dir}" && mkdir -p "${dir}"
    cat >"${dir}/go.mod" <<EOF
module societyrunner.local/controlplane/etcd

go 1.26
EOF
    cat >"${dir}/main.go" <<'EOF'
// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
    (
        cd "${dir}"
        "${GO[@]}" get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
        "${GO[@]}" mod tidy
        "${GO[@]}" build "${GO_BUILD_FLAGS[@]}" -ldflags="-s -w" -o "${BIN_DIR}/etcd.tmp" .
    )
    mv "${BIN_DIR}/etcd.tmp" "${BIN_DIR}/etcd"
}

# --- Kubernetes: wrapper module replacing ./staging with published modules ---
build_kubernetes() {
    local dir="${SRC_DIR}/kubernetes"
    rm -rf "${dir}" && mkdir -p "${dir}"
    local staging_version="v0.${KUBERNETES_VERSION#v1.}"
    local modfile
    modfile="$(cd "${dir}" && go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" |
        sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    [[ -f "${modfile}" ]] || die "could not download k8s.io/kubernetes@${KUBERNETES_VERSION}"
    {
        echo "module societyrunner.local/controlplane/kubernetes"
        echo
        echo "go 1.26"
        echo
        echo "require k8s.io/kubernetes ${KUBERNETES_VERSION}"
        echo
        echo "replace ("
        # Every staging module k8s.io/kubernetes requires at v0.0.0 comes from
        # its published release instead of ./staging/src.
        sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#\1#p' "${modfile}" |
            while read -r module; do
                if grep -Eq "^[[:space:]]*${module} v0\.0\.0" "${modfile}"; then
                    echo "	${module} => ${module} ${staging_version}"
                fi
            done
        echo ")"
    } >"${dir}/go.mod"
    local pkg="k8s.io/component-base/version"
    local cgo_pkg="k8s.io/client-go/pkg/version"
    local minor="${KUBERNETES_VERSION#v1.}"
    minor="${minor%%.*}"
    local build_date="2000-01-01T00:00:00Z"
    local ldflags="-s -w"
    for p in "${pkg}" "${cgo_pkg}"; do
        ldflags+=" -X ${p}.gitVersion=${KUBERNETES_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor}"
        ldflags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${build_date}"
    done
    local cmds=(kube-apiserver kube-scheduler kube-controller-manager)
    local pkgs=()
    for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
    (
        cd "${dir}"
        "${GO[@]}" get "${pkgs[@]/%/@${KUBERNETES_VERSION}}"
        mkdir -p out
        CGO_ENABLED=0 "${GO[@]}" build "${GO_BUILD_FLAGS[@]}" -ldflags="${ldflags}" -o out/ "${pkgs[@]}"
    )
    for c in "${cmds[@]}"; do mv "${dir}/out/${c}" "${BIN_DIR}/${c}"; done
}

# --- released Go commands without replace directives: go install pkg@version -
install_cmd() {
    local binary="$1" package="$2" version="$3"
    local tmp="${SRC_DIR}/gobin-${binary}"
    rm -rf "${tmp}" && mkdir -p "${tmp}"
    GOBIN="${tmp}" CGO_ENABLED=0 "${GO[@]}" install "${GO_BUILD_FLAGS[@]}" -ldflags="-s -w" "${package}@${version}"
    mv "${tmp}/$(basename "${package}")" "${BIN_DIR}/${binary}"
    rm -rf "${tmp}"
}

# --- a command built inside a copy of its own module (its go.mod and go.sum) --
# For modules whose version list the proxy does not serve: `go install pkg@version`
# also reads that list (for deprecation notices) and fails on its 403.
build_in_module() {
    local binary="$1" module="$2" version="$3" package_dir="$4"
    local dir="${SRC_DIR}/${binary}"
    rm -rf "${dir}"
    cp -r "$(module_dir "${module}@${version}")" "${dir}"
    chmod -R u+w "${dir}"
    (
        cd "${dir}"
        CGO_ENABLED=0 "${GO[@]}" build "${GO_BUILD_FLAGS[@]}" -ldflags="-s -w" -o "${BIN_DIR}/${binary}.tmp" "./${package_dir}"
    )
    mv "${BIN_DIR}/${binary}.tmp" "${BIN_DIR}/${binary}"
    rm -rf "${dir}"
}

module_dir() {
    local dir
    dir="$(cd "${SRC_DIR}" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${dir}" ]] || die "could not download $1"
    echo "${dir}"
}

have etcd || step "etcd ${ETCD_VERSION}" build_etcd
if ! (have kube-apiserver && have kube-scheduler && have kube-controller-manager); then
    step "kube-apiserver, kube-scheduler, kube-controller-manager ${KUBERNETES_VERSION}" build_kubernetes
fi
have kwok || step "kwok ${KWOK_VERSION}" install_cmd kwok sigs.k8s.io/kwok/cmd/kwok "${KWOK_VERSION}"
have kueue || step "kueue ${KUEUE_VERSION}" install_cmd kueue sigs.k8s.io/kueue/cmd/kueue "${KUEUE_VERSION}"
have agent-sandbox-controller || step "agent-sandbox-controller ${AGENT_SANDBOX_VERSION}" \
    build_in_module agent-sandbox-controller sigs.k8s.io/agent-sandbox "${AGENT_SANDBOX_VERSION}" cmd/agent-sandbox-controller

# --- manifests: copied verbatim from the module sources ----------------------
# Bump when the layout under manifests/ changes, so old caches are refreshed.
MANIFEST_LAYOUT=3

copy_manifests() {
    local kueue_dir sandbox_dir kwok_dir
    kueue_dir="$(module_dir "sigs.k8s.io/kueue@${KUEUE_VERSION}")"
    sandbox_dir="$(module_dir "sigs.k8s.io/agent-sandbox@${AGENT_SANDBOX_VERSION}")"
    kwok_dir="$(module_dir "sigs.k8s.io/kwok@${KWOK_VERSION}")"
    local tmp="${MANIFEST_DIR}.tmp"
    rm -rf "${tmp}"
    mkdir -p "${tmp}/kueue/crds" "${tmp}/kueue/crd-conversion-patches" "${tmp}/kueue/webhook" \
        "${tmp}/agent-sandbox/crds" "${tmp}/kwok/stages"
    cp "${kueue_dir}"/config/components/crd/bases/*.yaml "${tmp}/kueue/crds/"
    cp "${kueue_dir}"/config/components/crd/patches/webhook_in_*.yaml "${tmp}/kueue/crd-conversion-patches/"
    # Only the patches the release enables in its kustomization are applied.
    grep -E '^- path: patches/webhook_in_' "${kueue_dir}/config/components/crd/kustomization.yaml" |
        sed 's#^- path: patches/##' >"${tmp}/kueue/crd-conversion-patches/enabled.txt"
    cp "${kueue_dir}/config/components/webhook/manifests.yaml" \
        "${kueue_dir}/config/components/webhook/kustomization.yaml" "${tmp}/kueue/webhook/"
    cp "${sandbox_dir}"/k8s/crds/*.yaml "${tmp}/agent-sandbox/crds/"
    cp -r "${kwok_dir}/kustomize/stage/." "${tmp}/kwok/stages/"
    chmod -R u+w "${tmp}"
    rm -rf "${MANIFEST_DIR}"
    mv "${tmp}" "${MANIFEST_DIR}"
    echo "${MANIFEST_LAYOUT}" >"${MANIFEST_DIR}/.complete"
}

[[ "$(cat "${MANIFEST_DIR}/.complete" 2>/dev/null)" == "${MANIFEST_LAYOUT}" ]] || step "manifests" copy_manifests

# Build scratch (wrapper modules) is not needed once the binaries exist.
rm -rf "${SRC_DIR}"
log "control plane ready in ${OUT_DIR} (total $((SECONDS - START_ALL))s)"
echo "${OUT_DIR}"
