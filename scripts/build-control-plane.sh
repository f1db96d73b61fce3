#!/usr/bin/env bash
# Build the Kubernetes programs of the test cluster from the Go module proxy, at
# the pins of kind/versions.env: what the kind node image
# (scripts/build-kind-node-image.sh) takes from here (kube-apiserver,
# kube-scheduler, kube-controller-manager, kubelet, kube-proxy, containerd with
# ctr and its runc shim, and kube-router, the CNI and NetworkPolicy enforcer);
# kwok, which tests/kubernetes/kind_kwok.py deploys into the cluster with its
# stages; and the Kueue and Agent Sandbox CRDs the committed schemas are
# generated from (scripts/generate-kube-schemas.py).
#
# Prints one line per component with its time ("cached" when already built); the
# Go tool's own output goes to <output>/build.log (its tail is shown on failure).
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
for var in KUBERNETES_VERSION KWOK_VERSION KUEUE_VERSION AGENT_SANDBOX_VERSION \
    CONTAINERD_VERSION KUBE_ROUTER_VERSION; do
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
BUILD_LOG="${OUT_DIR}/build.log"

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
log "versions: kubernetes ${KUBERNETES_VERSION}, kwok ${KWOK_VERSION}, kueue ${KUEUE_VERSION}, agent-sandbox ${AGENT_SANDBOX_VERSION}, containerd ${CONTAINERD_VERSION}, kube-router ${KUBE_ROUTER_VERSION}"
log "output: ${OUT_DIR} (Go's output: ${BUILD_LOG})"

have() { [[ -x "${BIN_DIR}/$1" ]]; }

# step NAME CMD... : run CMD with its output in BUILD_LOG and print one line with
# its time; a failing command fails the whole script through the ERR trap
# (errexit alone is ignored inside `if`/`||`), showing the log's tail.
CURRENT_STEP=""
: >"${BUILD_LOG}"
exec 3>&2 # the terminal, also from inside a step whose output goes to the log
trap 'if [[ "${BASHPID}" == "$$" && -n "${CURRENT_STEP}" ]]; then { echo; tail -n 30 "${BUILD_LOG}"; echo "build-control-plane: ERROR: building ${CURRENT_STEP} failed; the whole Go output is in ${BUILD_LOG}"; } >&3; CURRENT_STEP=""; fi; exit 1' ERR
set -E
step() {
    CURRENT_STEP="$1"
    shift
    local t0=${SECONDS}
    echo "=== ${CURRENT_STEP} ($(date -u +%FT%TZ))" >>"${BUILD_LOG}"
    "$@" >>"${BUILD_LOG}" 2>&1
    log "$(printf '%-46s built in %4ds' "${CURRENT_STEP}" $((SECONDS - t0)))"
    CURRENT_STEP=""
}
cached() { log "$(printf '%-46s cached' "$1")"; }

# --- Kubernetes: wrapper module replacing ./staging with published modules ---
# kubernetes_module writes it once (KUBE_DIR); build_kube_cmd builds one command in it.
KUBE_DIR="${SRC_DIR}/kubernetes"
KUBE_LDFLAGS=""
kubernetes_module() {
    [[ -f "${KUBE_DIR}/.ready" ]] && return 0
    local dir="${KUBE_DIR}"
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
    local pkgs=()
    for c in kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy; do
        pkgs+=("k8s.io/kubernetes/cmd/${c}@${KUBERNETES_VERSION}")
    done
    (cd "${dir}" && "${GO[@]}" get "${pkgs[@]}")
    touch "${dir}/.ready"
}

kube_ldflags() {
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
    echo "${ldflags}"
}

build_kube_cmd() {
    local cmd="$1"
    kubernetes_module
    [[ -n "${KUBE_LDFLAGS}" ]] || KUBE_LDFLAGS="$(kube_ldflags)"
    (
        cd "${KUBE_DIR}"
        CGO_ENABLED=0 "${GO[@]}" build "${GO_BUILD_FLAGS[@]}" -ldflags="${KUBE_LDFLAGS}" \
            -o "${BIN_DIR}/${cmd}.tmp" "k8s.io/kubernetes/cmd/${cmd}"
    )
    mv "${BIN_DIR}/${cmd}.tmp" "${BIN_DIR}/${cmd}"
}

# --- containerd 2.x, ctr and the runc shim (no btrfs: it needs cgo headers) ---
build_containerd() {
    local tmp="${SRC_DIR}/gobin-containerd"
    rm -rf "${tmp}" && mkdir -p "${tmp}"
    local module="github.com/containerd/containerd/v2"
    GOBIN="${tmp}" CGO_ENABLED=0 "${GO[@]}" install "${GO_BUILD_FLAGS[@]}" -tags no_btrfs \
        -ldflags="-s -w -X ${module}/version.Version=${CONTAINERD_VERSION}" \
        "${module}/cmd/containerd@${CONTAINERD_VERSION}" \
        "${module}/cmd/ctr@${CONTAINERD_VERSION}" \
        "${module}/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}"
    for b in ctr containerd-shim-runc-v2 containerd; do mv "${tmp}/${b}" "${BIN_DIR}/${b}"; done
    rm -rf "${tmp}"
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

module_dir() {
    local dir
    dir="$(cd "${SRC_DIR}" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${dir}" ]] || die "could not download $1"
    echo "${dir}"
}

# component LABEL "BINARY..." CMD... : build unless every BINARY is there already.
component() {
    local label="$1" binaries="$2"
    shift 2
    local b
    for b in ${binaries}; do
        if ! have "${b}"; then
            step "${label}" "$@"
            return
        fi
    done
    cached "${label}"
}

for cmd in kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy; do
    component "${cmd} ${KUBERNETES_VERSION}" "${cmd}" build_kube_cmd "${cmd}"
done
component "kwok ${KWOK_VERSION}" kwok install_cmd kwok sigs.k8s.io/kwok/cmd/kwok "${KWOK_VERSION}"
component "containerd, ctr, runc shim ${CONTAINERD_VERSION}" "containerd ctr containerd-shim-runc-v2" \
    build_containerd
component "kube-router ${KUBE_ROUTER_VERSION}" kube-router \
    install_cmd kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router "${KUBE_ROUTER_VERSION}"

# --- manifests: copied verbatim from the module sources ----------------------
# Bump when the layout under manifests/ changes, so old caches are refreshed.
MANIFEST_LAYOUT=4

copy_manifests() {
    local kueue_dir sandbox_dir kwok_dir
    kueue_dir="$(module_dir "sigs.k8s.io/kueue@${KUEUE_VERSION}")"
    sandbox_dir="$(module_dir "sigs.k8s.io/agent-sandbox@${AGENT_SANDBOX_VERSION}")"
    kwok_dir="$(module_dir "sigs.k8s.io/kwok@${KWOK_VERSION}")"
    local tmp="${MANIFEST_DIR}.tmp"
    rm -rf "${tmp}"
    mkdir -p "${tmp}/kueue/crds" "${tmp}/agent-sandbox/crds" "${tmp}/kwok/stages"
    cp "${kueue_dir}"/config/components/crd/bases/*.yaml "${tmp}/kueue/crds/"
    cp "${sandbox_dir}"/k8s/crds/*.yaml "${tmp}/agent-sandbox/crds/"
    cp -r "${kwok_dir}/kustomize/stage/." "${tmp}/kwok/stages/"
    chmod -R u+w "${tmp}"
    rm -rf "${MANIFEST_DIR}"
    mv "${tmp}" "${MANIFEST_DIR}"
    echo "${MANIFEST_LAYOUT}" >"${MANIFEST_DIR}/.complete"
}

if [[ "$(cat "${MANIFEST_DIR}/.complete" 2>/dev/null)" == "${MANIFEST_LAYOUT}" ]]; then
    cached "manifests"
else
    step "manifests" copy_manifests
fi

# Build scratch (wrapper modules) is not needed once the binaries exist.
rm -rf "${SRC_DIR}"
log "control plane ready in ${OUT_DIR} (total $((SECONDS - START_ALL))s)"
echo "${OUT_DIR}"
