#!/usr/bin/env bash
# Build the static profile-check tools (helm, tofu, tflint, kubeconform) and the GCS emulator
# used by the ledger-export tests (fake-gcs-server) from the Go module proxy.
#
# Idempotent: binaries land in
#   ${SOCIETY_TOOLS_DIR:-$HOME/.cache/society-runner/tools}/<hash of scripts/tool-versions.env>/bin/
# and whatever is already there is skipped. The terminal gets one line per tool with its time;
# the Go tool's own output goes to build.log beside bin/.
#
# Usage: scripts/build-tools.sh [--print-dir]
#   --print-dir   print the output directory and exit (builds nothing)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSIONS_FILE="${REPO_ROOT}/scripts/tool-versions.env"

die() {
    echo "build-tools: ERROR: $*" >&2
    exit 1
}
log() { echo "build-tools: $*" >&2; }

[[ -f "${VERSIONS_FILE}" ]] || die "missing ${VERSIONS_FILE}"
# shellcheck source=tool-versions.env
source "${VERSIONS_FILE}"
for var in HELM_VERSION OPENTOFU_VERSION TFLINT_VERSION KUBECONFORM_VERSION FAKE_GCS_SERVER_VERSION; do
    [[ -n "${!var:-}" ]] || die "${var} is not set in ${VERSIONS_FILE}"
done

VERSIONS_HASH="$(sha256sum "${VERSIONS_FILE}" | cut -c1-16)"
OUT_DIR="${SOCIETY_TOOLS_DIR:-${HOME}/.cache/society-runner/tools}/${VERSIONS_HASH}"
BIN_DIR="${OUT_DIR}/bin"
SRC_DIR="${OUT_DIR}/src"

if [[ "${1:-}" == "--print-dir" ]]; then
    echo "${OUT_DIR}"
    exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:${PATH}"
fi
command -v go >/dev/null 2>&1 || die "'go' is not on PATH; install Go >= 1.26 (https://go.dev/dl) and retry"

mkdir -p "${BIN_DIR}" "${SRC_DIR}"

# One build at a time per output directory (parallel test sessions share it).
exec 9>"${OUT_DIR}/.lock"
if ! flock -n 9; then
    log "another build holds ${OUT_DIR}/.lock; waiting"
    flock 9
fi

export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
GO=(nice -n 10 go)
# Check tools and a test emulator: no optimisation or inlining (-N -l) makes the cold build
# about a fifth faster (helm: 100 s against 122 s, cold cache, 2 idle cores) at no cost that
# the checks or the tests notice.
GO_BUILD_FLAGS=(-p "${TOOLS_GO_PARALLEL:-2}" -trimpath "-gcflags=all=-N -l")

START_ALL=${SECONDS}
BUILD_LOG="${OUT_DIR}/build.log"
: >"${BUILD_LOG}"
# One step: its Go output goes to build-<binary>.log (two lanes build at once), then build.log.
# On failure the lane prints the log's tail and exits 1; the script then fails.
step() {
    local name="$1" binary="$2"
    shift 2
    local t0=${SECONDS} log="${OUT_DIR}/build-${binary}.log" pid
    # As a job of its own, so that `set -e` holds inside it (a condition would suspend it).
    "$@" >"${log}" 2>&1 &
    pid=$!
    if ! wait "${pid}" || [[ ! -x "${BIN_DIR}/${binary}" ]]; then
        { tail -n 30 "${log}"; echo "build-tools: ERROR: building ${name} failed; the whole Go output is in ${log}"; } >&2
        return 1
    fi
    { echo "=== ${name}"; cat "${log}"; } >>"${BUILD_LOG}"
    rm -f "${log}"
    echo "build-tools: ${name} built in $((SECONDS - t0))s" >&2
}

have() { [[ -x "${BIN_DIR}/$1" ]]; }

# A released command without replace directives: go install pkg@version.
install_cmd() {
    local binary="$1" package="$2" version="$3" ldflags="${4:-}"
    local tmp="${SRC_DIR}/gobin-${binary}"
    rm -rf "${tmp}" && mkdir -p "${tmp}"
    GOBIN="${tmp}" CGO_ENABLED=0 "${GO[@]}" install "${GO_BUILD_FLAGS[@]}" -ldflags="-s -w ${ldflags}" "${package}@${version}"
    mv "${tmp}/$(basename "${package}")" "${BIN_DIR}/${binary}"
    rm -rf "${tmp}"
}

# A command whose module has replace directives (`go install pkg@version` refuses those):
# built inside a copy of its own module, with its go.mod and go.sum.
build_in_module() {
    local binary="$1" module="$2" version="$3" package_dir="$4" ldflags="${5:-}"
    local dir="${SRC_DIR}/${binary}" mod_dir
    mod_dir="$(cd "${SRC_DIR}" && go mod download -json "${module}@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${mod_dir}" ]] || die "could not download ${module}@${version}"
    rm -rf "${dir}"
    cp -r "${mod_dir}" "${dir}"
    chmod -R u+w "${dir}"
    (
        cd "${dir}"
        CGO_ENABLED=0 "${GO[@]}" build "${GO_BUILD_FLAGS[@]}" -ldflags="-s -w ${ldflags}" -o "${BIN_DIR}/${binary}.tmp" "./${package_dir}"
    )
    mv "${BIN_DIR}/${binary}.tmp" "${BIN_DIR}/${binary}"
    rm -rf "${dir}"
}

# Two lanes at once on the two cores: one compiles while the other links or waits on a
# dependency (cold, 2 idle cores: 357 s one after another, see the README for both lanes).
lane_tofu() {
    have tofu || step "tofu ${OPENTOFU_VERSION}" tofu \
        build_in_module tofu github.com/opentofu/opentofu "${OPENTOFU_VERSION}" cmd/tofu \
        "-X github.com/opentofu/opentofu/version.dev=no" || return 1
}
lane_rest() {
    have helm || step "helm ${HELM_VERSION}" helm \
        install_cmd helm helm.sh/helm/v4/cmd/helm "${HELM_VERSION}" "-X helm.sh/helm/v4/internal/version.version=${HELM_VERSION}" || return 1
    have tflint || step "tflint ${TFLINT_VERSION}" tflint \
        install_cmd tflint github.com/terraform-linters/tflint "${TFLINT_VERSION}" || return 1
    have fake-gcs-server || step "fake-gcs-server ${FAKE_GCS_SERVER_VERSION}" fake-gcs-server \
        install_cmd fake-gcs-server github.com/fsouza/fake-gcs-server "${FAKE_GCS_SERVER_VERSION}" || return 1
    have kubeconform || step "kubeconform ${KUBECONFORM_VERSION}" kubeconform \
        install_cmd kubeconform github.com/yannh/kubeconform/cmd/kubeconform "${KUBECONFORM_VERSION}" || return 1
}
lane_tofu &
tofu_lane=$!
lane_rest_ok=0
lane_rest || lane_rest_ok=$?
tofu_ok=0
wait "${tofu_lane}" || tofu_ok=$?
(( lane_rest_ok == 0 && tofu_ok == 0 )) || die "a tool did not build (its log's tail is above)"

rm -rf "${SRC_DIR}"
log "tools ready in ${OUT_DIR} (total $((SECONDS - START_ALL))s)"
echo "${OUT_DIR}"
