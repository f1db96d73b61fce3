#!/usr/bin/env bash
# Build what `society cluster up --profile kind --addons-from-source` installs beside the node
# image, from the Go module proxy, with no registry:
#   registry       distribution's `registry` (REGISTRY_VERSION of kind/addons.env)
#   kueue          Kueue's manager (KUEUE_VERSION of kind/versions.env)
#   agent-sandbox  the Agent Sandbox controller (AGENT_SANDBOX_VERSION of kind/versions.env)
# each static (CGO_ENABLED=0) in an image FROM scratch in podman's storage, its digest recorded;
# and the two add-ons' manifests rendered from the served modules' own kustomizations
# (Kueue's config/default, Agent Sandbox's k8s/) with the node image's kubectl
# (`kubectl kustomize`), with only their image references mapped to the images built here.
# KUEUE_VERSION and AGENT_SANDBOX_VERSION in the environment override versions.env's.
#
# Idempotent: the binaries land in
#   ${SOCIETY_KIND_ADDONS_DIR:-$HOME/.cache/society-runner/kind-addons}/<key>/
# keyed by the three pins; the images' tags and the manifests also by this script. Prints one
# line per component with its time on stderr, and on stdout the path of addons.json: each
# image's reference and digest, and each manifest's path.
#
# Usage: scripts/build-kind-addon-images.sh [--print-dir]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() {
    echo "build-kind-addon-images: ERROR: $*" >&2
    exit 1
}
log() { echo "build-kind-addon-images: $*" >&2; }

pin() { sed -n "s/^$1=//p" "$2" | tail -n 1; }
REGISTRY_VERSION="$(pin REGISTRY_VERSION "${REPO_ROOT}/kind/addons.env")"
KUEUE_VERSION="${KUEUE_VERSION:-$(pin KUEUE_VERSION "${REPO_ROOT}/kind/versions.env")}"
AGENT_SANDBOX_VERSION="${AGENT_SANDBOX_VERSION:-$(pin AGENT_SANDBOX_VERSION "${REPO_ROOT}/kind/versions.env")}"
for var in REGISTRY_VERSION KUEUE_VERSION AGENT_SANDBOX_VERSION; do
    [[ -n "${!var}" ]] || die "${var} is not pinned (kind/addons.env, kind/versions.env)"
done
PINS="registry ${REGISTRY_VERSION} kueue ${KUEUE_VERSION} agent-sandbox ${AGENT_SANDBOX_VERSION}"
KEY="$(echo "${PINS}" | sha256sum | cut -c1-12)"
IMAGE_KEY="$(echo "${PINS}" | cat - "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
OUT="${SOCIETY_KIND_ADDONS_DIR:-${HOME}/.cache/society-runner/kind-addons}/${KEY}"
if [[ "${1:-}" == "--print-dir" ]]; then
    echo "${OUT}"
    exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:${PATH}"
fi
for tool in go podman jq; do
    command -v "${tool}" >/dev/null 2>&1 || die "'${tool}' is missing; run scripts/install-node.sh (Go: https://go.dev/dl)"
done
KUBECTL="$("${REPO_ROOT}/scripts/build-kind-node-image.sh" --print-dir)/bin/kubectl"
[[ -x "${KUBECTL}" ]] || die "no ${KUBECTL}: run scripts/build-kind-node-image.sh first (it builds kubectl)"

mkdir -p "${OUT}/bin" "${OUT}/src"
exec 9>"${OUT}/.lock"
flock 9
BUILD_LOG="${OUT}/build.log"
: >"${BUILD_LOG}"
exec 3>&2
CURRENT_STEP=""
trap 'if [[ -n "${CURRENT_STEP}" ]]; then tail -n 30 "${BUILD_LOG}" >&3; echo "build-kind-addon-images: ERROR: ${CURRENT_STEP} failed; the whole log is ${BUILD_LOG}" >&3; fi; exit 1' ERR
set -E
step() {
    CURRENT_STEP="$1"
    shift
    local t0=${SECONDS}
    echo "=== ${CURRENT_STEP} ($(date -u +%FT%TZ))" >>"${BUILD_LOG}"
    "$@" >>"${BUILD_LOG}" 2>&1
    log "$(printf '%-44s built in %4ds' "${CURRENT_STEP}" $((SECONDS - t0)))"
    CURRENT_STEP=""
}
cached() { log "$(printf '%-44s cached' "$1")"; }
unless_present() {
    local file="$1" label="$2"
    shift 2
    if [[ -e "${file}" ]]; then cached "${label}"; else step "${label}" "$@"; fi
}
START=${SECONDS}
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
# Agent Sandbox releases are not in the public checksum database; everything else is verified.
export GONOSUMDB="${GONOSUMDB:+${GONOSUMDB},}sigs.k8s.io/agent-sandbox"
GO=(nice -n 10 go)

module_dir() {
    local dir
    dir="$(cd "${OUT}/src" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${dir}" ]] || die "could not download $1 from the Go module proxy"
    echo "${dir}"
}

# --- the three programs, static ------------------------------------------------------------
go_install() {
    local tmp="${OUT}/src/gobin-$1"
    rm -rf "${tmp}" && mkdir -p "${tmp}"
    GOBIN="${tmp}" CGO_ENABLED=0 "${GO[@]}" install -p 2 -trimpath -ldflags="-s -w" "$2@$3"
    mv "${tmp}/$(basename "$2")" "${OUT}/bin/$1"
    rm -rf "${tmp}"
}
# Inside a copy of its own module: the proxy does not serve agent-sandbox's version list, which
# `go install pkg@version` reads.
build_sandbox() {
    local dir="${OUT}/src/agent-sandbox"
    rm -rf "${dir}"
    cp -r "$(module_dir "sigs.k8s.io/agent-sandbox@${AGENT_SANDBOX_VERSION}")" "${dir}"
    chmod -R u+w "${dir}"
    (cd "${dir}" && CGO_ENABLED=0 "${GO[@]}" build -p 2 -trimpath -ldflags="-s -w" \
        -o "${OUT}/bin/agent-sandbox-controller.tmp" ./cmd/agent-sandbox-controller)
    mv "${OUT}/bin/agent-sandbox-controller.tmp" "${OUT}/bin/agent-sandbox-controller"
    rm -rf "${dir}"
}
unless_present "${OUT}/bin/registry" "registry (distribution ${REGISTRY_VERSION})" \
    go_install registry github.com/distribution/distribution/v3/cmd/registry "${REGISTRY_VERSION}"
unless_present "${OUT}/bin/kueue" "kueue ${KUEUE_VERSION}" \
    go_install kueue sigs.k8s.io/kueue/cmd/kueue "${KUEUE_VERSION}"
unless_present "${OUT}/bin/agent-sandbox-controller" "agent-sandbox-controller ${AGENT_SANDBOX_VERSION}" \
    build_sandbox

# --- images FROM scratch ----------------------------------------------------------------------
REGISTRY_IMAGE="localhost/society/kind-registry:${REGISTRY_VERSION}-${IMAGE_KEY}"
KUEUE_IMAGE="localhost/society/kueue:${KUEUE_VERSION}-${IMAGE_KEY}"
SANDBOX_IMAGE="localhost/society/agent-sandbox-controller:${AGENT_SANDBOX_VERSION}-${IMAGE_KEY}"
# scratch_image REF BINARY PATH [EXTRA_LINE...]: BINARY at PATH as the entrypoint, as uid 65532
# (the upstream images' distroless nonroot user; Kueue's pod sets runAsNonRoot), with a /tmp.
scratch_image() {
    local ref="$1" binary="$2" path="$3"
    shift 3
    local ctx
    ctx="${OUT}/src/ctx-$(basename "${binary}")"
    rm -rf "${ctx}" && mkdir -p "${ctx}/tmp"
    chmod 1777 "${ctx}/tmp"
    cp "${binary}" "${ctx}/program"
    {
        printf 'FROM scratch\nCOPY program %s\nCOPY tmp /tmp\n' "${path}"
        local line
        for line in "$@"; do printf '%s\n' "${line}"; done
        printf 'USER 65532:65532\nENTRYPOINT ["%s"]\n' "${path}"
    } >"${ctx}/Containerfile"
    [[ -z "${EXTRA_FILE:-}" ]] || cp "${EXTRA_FILE}" "${ctx}/"
    podman build --quiet --layers=false --network=none -t "${ref}" "${ctx}"
    rm -rf "${ctx}"
}
# distribution's own configuration format; filesystem storage in a volume, plain HTTP on :5000.
registry_image() {
    local config="${OUT}/src/registry-config.yml"
    printf '%s\n' 'version: 0.1' 'log:' '  level: info' 'storage:' '  filesystem:' \
        '    rootdirectory: /var/lib/registry' 'http:' '  addr: :5000' >"${config}"
    EXTRA_FILE="${config}" scratch_image "${REGISTRY_IMAGE}" "${OUT}/bin/registry" /usr/local/bin/registry \
        'COPY registry-config.yml /etc/distribution/config.yml' \
        'COPY --chown=65532:65532 tmp /var/lib/registry' 'VOLUME /var/lib/registry' \
        'CMD ["serve", "/etc/distribution/config.yml"]'
    rm -f "${config}"
}
image_step() {
    local image="$1" label="$2"
    shift 2
    if podman image exists "${image}"; then cached "${label}"; else step "${label}" "$@"; fi
}
image_step "${REGISTRY_IMAGE}" "image registry ${REGISTRY_VERSION}" registry_image
image_step "${KUEUE_IMAGE}" "image kueue ${KUEUE_VERSION}" \
    scratch_image "${KUEUE_IMAGE}" "${OUT}/bin/kueue" /manager
image_step "${SANDBOX_IMAGE}" "image agent-sandbox-controller ${AGENT_SANDBOX_VERSION}" \
    scratch_image "${SANDBOX_IMAGE}" "${OUT}/bin/agent-sandbox-controller" /agent-sandbox-controller

# --- the manifests, from the modules' kustomizations -----------------------------------------
MANIFESTS="${OUT}/manifests-${IMAGE_KEY}"
# render NAME KUSTOMIZATION_DIR UPSTREAM_IMAGE LOCAL_IMAGE: `kubectl kustomize`, then the one image
# reference swapped (it must be there exactly as expected, or the module changed its layout).
render() {
    local name="$1" dir="$2" upstream="$3" local_image="$4" rendered="${OUT}/src/$1.yaml"
    "${KUBECTL}" kustomize "${dir}" >"${rendered}"
    grep -qF "image: ${upstream}" "${rendered}" || die "${name}: no 'image: ${upstream}' in the rendered manifest"
    sed "s#image: ${upstream}\$#image: ${local_image}#" "${rendered}" >"${MANIFESTS}/${name}.yaml.tmp"
    ! grep -qF "image: ${upstream}" "${MANIFESTS}/${name}.yaml.tmp" || die "${name}: an upstream image reference is left"
    mv "${MANIFESTS}/${name}.yaml.tmp" "${MANIFESTS}/${name}.yaml"
    rm -f "${rendered}"
}
render_all() {
    mkdir -p "${MANIFESTS}"
    local kueue sandbox
    kueue="$(module_dir "sigs.k8s.io/kueue@${KUEUE_VERSION}")"
    sandbox="$(module_dir "sigs.k8s.io/agent-sandbox@${AGENT_SANDBOX_VERSION}")"
    # Kueue's config/default names its manager image in config/components/manager.
    render kueue "${kueue}/config/default" \
        "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:main" "${KUEUE_IMAGE}"
    # The release tooling swaps ko:// for the published image; this swaps it for the local one.
    render agent-sandbox "${sandbox}/k8s" \
        "ko://sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller" "${SANDBOX_IMAGE}"
}
if [[ -f "${MANIFESTS}/kueue.yaml" && -f "${MANIFESTS}/agent-sandbox.yaml" ]]; then
    cached "manifests (kueue, agent-sandbox)"
else
    step "manifests (kueue, agent-sandbox)" render_all
fi

digest() { podman image inspect --format '{{.Digest}}' "$1"; }
jq -n --arg registry "${REGISTRY_IMAGE}" --arg registryDigest "$(digest "${REGISTRY_IMAGE}")" \
    --arg kueue "${KUEUE_IMAGE}" --arg kueueDigest "$(digest "${KUEUE_IMAGE}")" \
    --arg sandbox "${SANDBOX_IMAGE}" --arg sandboxDigest "$(digest "${SANDBOX_IMAGE}")" \
    --arg kueueManifest "${MANIFESTS}/kueue.yaml" --arg sandboxManifest "${MANIFESTS}/agent-sandbox.yaml" \
    --arg kueueVersion "${KUEUE_VERSION}" --arg sandboxVersion "${AGENT_SANDBOX_VERSION}" \
    --arg registryVersion "${REGISTRY_VERSION}" \
    '{registry: {image: $registry, digest: $registryDigest, version: $registryVersion},
      addons: {kueue: {image: $kueue, digest: $kueueDigest, manifest: $kueueManifest, version: $kueueVersion},
               "agent-sandbox": {image: $sandbox, digest: $sandboxDigest, manifest: $sandboxManifest, version: $sandboxVersion}}}' \
    >"${OUT}/addons.json.tmp"
mv "${OUT}/addons.json.tmp" "${OUT}/addons.json"
log "add-on images ready in $((SECONDS - START))s"
echo "${OUT}/addons.json"
