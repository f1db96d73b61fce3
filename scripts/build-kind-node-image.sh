#!/usr/bin/env bash
# Build the test cluster's kind node image with podman and mmdebstrap, with no registry:
#   node rootfs       Debian (NODE_DEBIAN_SUITE) with systemd, runc, the CNI plugins, iptables
#   component rootfs  Debian minbase with iptables, ipset, conntrack (kube-proxy, kube-router)
#   kubeadm, kubectl  built from the Go module proxy (KUBERNETES_VERSION of kind/versions.env)
#   etcd, CoreDNS     the releases kubeadm asks for (NODE_ETCD_VERSION, NODE_COREDNS_VERSION),
#                     from the Go module proxy, static (CGO_ENABLED=0)
#   local-path-provisioner  NODE_LOCAL_PATH_VERSION, from the Go module proxy
#   component images  kube-apiserver, -controller-manager, -scheduler, etcd, CoreDNS,
#                     local-path-provisioner, pause (kind/pause) FROM scratch; kube-proxy,
#                     kube-router and local-path's helper on the component rootfs
#   node image        kind/node-image/Containerfile on the node rootfs, with kind's node files
#                     from the kind module (KIND_VERSION), the control-plane build's kubelet and
#                     containerd, kube-router as the default CNI, local-path-provisioner's own
#                     manifest (from its module) as the default storage; then the images are
#                     imported into its containerd (pinned, as kind's own build does) and the
#                     container is committed.
# The control plane's binaries come from scripts/build-control-plane.sh (run here; cached).
#
# Idempotent: everything lands in
#   ${SOCIETY_KIND_NODE_DIR:-$HOME/.cache/society-runner/kind-node}/<key>/
# keyed by kind/node-image.env and kind/versions.env (the node image's tag also by
# kind/node-image/ and this script; the rootfs images' by their packages); a step whose output is
# there is skipped. The node image goes to podman's default storage (kind reads it
# there). Prints one line per component with its time on stderr, the image reference on stdout.
#
# Usage: scripts/build-kind-node-image.sh [--print-image | --print-dir]
#   --print-image  print the node image's reference and exit (builds nothing)
#   --print-dir    print the output directory (bin/kubectl is there) and exit
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINS="${REPO_ROOT}/kind/node-image.env"
VERSIONS="${REPO_ROOT}/kind/versions.env"
die() {
    echo "build-kind-node-image: ERROR: $*" >&2
    exit 1
}
log() { echo "build-kind-node-image: $*" >&2; }

# shellcheck source=../kind/versions.env
source "${VERSIONS}"
# shellcheck source=../kind/node-image.env
source "${PINS}"
# The binaries and component archives are keyed by the pins the node uses (not by the Kueue,
# Agent Sandbox or KWOK lines of versions.env); the node image also by its recipe.
NODE_PINS="$(cat "${PINS}"; grep -E '^(KUBERNETES|CONTAINERD|KUBE_ROUTER)_VERSION=' "${VERSIONS}")"
KEY="$(printf '%s\n' "${NODE_PINS}" | cat - "${REPO_ROOT}/kind/pause/pause.c" | sha256sum | cut -c1-12)"
IMAGE_KEY="$(printf '%s\n' "${NODE_PINS}" | cat - "${BASH_SOURCE[0]}" "${REPO_ROOT}"/kind/node-image/* |
    sha256sum | cut -c1-12)"
OUT="${SOCIETY_KIND_NODE_DIR:-${HOME}/.cache/society-runner/kind-node}/${KEY}"
IMAGE="localhost/society/kind-node:${KUBERNETES_VERSION}-${IMAGE_KEY}"
case "${1:-}" in
--print-image) echo "${IMAGE}" && exit 0 ;;
--print-dir) echo "${OUT}" && exit 0 ;;
esac

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:${PATH}"
fi
for tool in go podman mmdebstrap gcc; do
    command -v "${tool}" >/dev/null 2>&1 || die "'${tool}' is missing; run scripts/install-node.sh (Go: https://go.dev/dl)"
done

mkdir -p "${OUT}/bin" "${OUT}/archives" "${OUT}/src"
exec 9>"${OUT}/.lock"
flock 9
BUILD_LOG="${OUT}/build.log"
: >"${BUILD_LOG}"
exec 3>&2
CURRENT_STEP=""
trap 'if [[ -n "${CURRENT_STEP}" ]]; then tail -n 30 "${BUILD_LOG}" >&3; echo "build-kind-node-image: ERROR: ${CURRENT_STEP} failed; the whole log is ${BUILD_LOG}" >&3; fi; exit 1' ERR
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
# unless_present FILE LABEL CMD... : run the step unless FILE exists.
unless_present() {
    local file="$1" label="$2"
    shift 2
    if [[ -e "${file}" ]]; then cached "${label}"; else step "${label}" "$@"; fi
}
START=${SECONDS}
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
GO=(nice -n 10 go)

CP_DIR="$("${REPO_ROOT}/scripts/build-control-plane.sh")"
module_dir() {
    local dir
    dir="$(cd "${OUT}/src" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${dir}" ]] || die "could not download $1 from the Go module proxy"
    echo "${dir}"
}
KIND_DIR="$(module_dir "sigs.k8s.io/kind@${KIND_VERSION}")"

# --- kubeadm and kubectl: a wrapper module using the published staging modules ----------
build_kube() {
    local dir="${OUT}/src/kubernetes" staging="v0.${KUBERNETES_VERSION#v1.}" modfile
    rm -rf "${dir}" && mkdir -p "${dir}"
    modfile="$(module_dir "k8s.io/kubernetes@${KUBERNETES_VERSION}")/go.mod"
    {
        printf 'module societyrunner.local/kindnode/kubernetes\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' \
            "${KUBERNETES_VERSION}"
        sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#\1#p' "${modfile}" |
            while read -r module; do
                if grep -Eq "^[[:space:]]*${module} v0\.0\.0" "${modfile}"; then
                    printf '\t%s => %s %s\n' "${module}" "${module}" "${staging}"
                fi
            done
        echo ")"
    } >"${dir}/go.mod"
    local minor="${KUBERNETES_VERSION#v1.}" flags="-s -w" p
    minor="${minor%%.*}"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X ${p}.gitVersion=${KUBERNETES_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor}"
        flags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=2000-01-01T00:00:00Z"
    done
    (
        cd "${dir}"
        "${GO[@]}" get "k8s.io/kubernetes/cmd/kubeadm@${KUBERNETES_VERSION}" "k8s.io/kubernetes/cmd/kubectl@${KUBERNETES_VERSION}"
        for cmd in kubeadm kubectl; do
            CGO_ENABLED=0 "${GO[@]}" build -p 2 -trimpath -ldflags="${flags}" -o "${OUT}/bin/${cmd}.tmp" "k8s.io/kubernetes/cmd/${cmd}"
        done
    )
    mv "${OUT}/bin/kubectl.tmp" "${OUT}/bin/kubectl"
    mv "${OUT}/bin/kubeadm.tmp" "${OUT}/bin/kubeadm"
}
unless_present "${OUT}/bin/kubeadm" "kubeadm, kubectl ${KUBERNETES_VERSION}" build_kube

# --- etcd, static: kubeadm's static pod runs it FROM scratch ------------------------------
build_etcd() {
    local dir="${OUT}/src/etcd"
    rm -rf "${dir}" && mkdir -p "${dir}"
    printf 'module societyrunner.local/kindnode/etcd\n\ngo 1.26\n' >"${dir}/go.mod"
    printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >"${dir}/main.go"
    (
        cd "${dir}"
        "${GO[@]}" get "go.etcd.io/etcd/server/v3@${NODE_ETCD_VERSION}"
        "${GO[@]}" mod tidy
        CGO_ENABLED=0 "${GO[@]}" build -p 2 -trimpath -ldflags="-s -w" -o "${OUT}/bin/etcd.tmp" .
    )
    mv "${OUT}/bin/etcd.tmp" "${OUT}/bin/etcd"
}
unless_present "${OUT}/bin/etcd" "etcd ${NODE_ETCD_VERSION} (static)" build_etcd

# go_install BINARY PACKAGE VERSION: a released command whose module has no replace directives.
go_install() {
    local tmp="${OUT}/src/gobin-$1"
    rm -rf "${tmp}" && mkdir -p "${tmp}"
    GOBIN="${tmp}" CGO_ENABLED=0 "${GO[@]}" install -p 2 -trimpath -ldflags="-s -w" "$2@$3"
    mv "${tmp}/$(basename "$2")" "${OUT}/bin/$1"
    rm -rf "${tmp}"
}
unless_present "${OUT}/bin/coredns" "coredns ${NODE_COREDNS_VERSION}" \
    go_install coredns github.com/coredns/coredns "${NODE_COREDNS_VERSION}"
unless_present "${OUT}/bin/local-path-provisioner" "local-path-provisioner ${NODE_LOCAL_PATH_VERSION}" \
    go_install local-path-provisioner github.com/rancher/local-path-provisioner "${NODE_LOCAL_PATH_VERSION}"

build_pause() { gcc -static -Os -s -o "${OUT}/bin/pause" "${REPO_ROOT}/kind/pause/pause.c"; }
unless_present "${OUT}/bin/pause" "pause (kind/pause)" build_pause

# --- the two Debian root filesystems, imported into podman --------------------------------
NODE_PACKAGES="systemd,dbus,runc,containernetworking-plugins,conntrack,iptables,nftables,ipset,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,procps,jq"
COMPONENT_PACKAGES="iptables,ipset,conntrack,nftables,ca-certificates"
rootfs_key() { echo "${NODE_DEBIAN_SUITE} $1" | sha256sum | cut -c1-12; }
NODE_BASE="localhost/society/kind-node-rootfs:$(rootfs_key "${NODE_PACKAGES}")"
COMPONENT_BASE="localhost/society/kind-component-rootfs:$(rootfs_key "${COMPONENT_PACKAGES}")"
rootfs() {
    local image="$1" packages="$2" tar="${OUT}/$3.tar"
    mmdebstrap --variant=minbase --format=tar --include="${packages}" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' "${NODE_DEBIAN_SUITE}" "${tar}.tmp"
    podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "${tar}.tmp" "${image}"
    rm -f "${tar}.tmp"
}
image_step() {
    local image="$1" label="$2"
    shift 2
    if podman image exists "${image}"; then cached "${label}"; else step "${label}" "$@"; fi
}
image_step "${NODE_BASE}" "node rootfs (Debian ${NODE_DEBIAN_SUITE})" rootfs "${NODE_BASE}" "${NODE_PACKAGES}" node
image_step "${COMPONENT_BASE}" "component rootfs (Debian ${NODE_DEBIAN_SUITE})" \
    rootfs "${COMPONENT_BASE}" "${COMPONENT_PACKAGES}" component

# --- component images, saved as archives for the node's containerd -------------------------
KUBE_ROUTER_IMAGE="localhost/society/kube-router:${KUBE_ROUTER_VERSION}"
component_image() {
    local name="$1" ref="$2" base="$3" binary="$4"
    local ctx="${OUT}/src/ctx-${name}"
    rm -rf "${ctx}" && mkdir -p "${ctx}"
    cp "${binary}" "${ctx}/"
    local program
    program="$(basename "${binary}")"
    # PATH too: a manifest may name the program alone (local-path-provisioner's does).
    printf 'FROM %s\nENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nCOPY %s /usr/local/bin/%s\nENTRYPOINT ["/usr/local/bin/%s"]\n' \
        "${base}" "${program}" "${program}" "${program}" >"${ctx}/Containerfile"
    podman build --quiet --layers=false --network=none -t "${ref}" "${ctx}"
    podman save --format docker-archive -o "${OUT}/archives/${name}.tar.tmp" "${ref}"
    mv "${OUT}/archives/${name}.tar.tmp" "${OUT}/archives/${name}.tar"
    podman rmi "${ref}"  # the archive is what the node imports; no registry name stays here
    rm -rf "${ctx}"
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
    unless_present "${OUT}/archives/${c}.tar" "image ${c} ${KUBERNETES_VERSION}" \
        component_image "${c}" "registry.k8s.io/${c}:${KUBERNETES_VERSION}" scratch "${CP_DIR}/bin/${c}"
done
unless_present "${OUT}/archives/kube-proxy.tar" "image kube-proxy ${KUBERNETES_VERSION}" \
    component_image kube-proxy "registry.k8s.io/kube-proxy:${KUBERNETES_VERSION}" "${COMPONENT_BASE}" "${CP_DIR}/bin/kube-proxy"
KUBEADM_IMAGES="$("${OUT}/bin/kubeadm" config images list --kubernetes-version "${KUBERNETES_VERSION}")"
ETCD_TAG="$(grep /etcd: <<<"${KUBEADM_IMAGES}")"
[[ "${ETCD_TAG}" == *":${NODE_ETCD_VERSION#v}-"* ]] ||
    die "kubeadm ${KUBERNETES_VERSION} asks for ${ETCD_TAG}, not etcd ${NODE_ETCD_VERSION}: set NODE_ETCD_VERSION in ${PINS}"
COREDNS_TAG="$(grep /coredns: <<<"${KUBEADM_IMAGES}")"
[[ "${COREDNS_TAG}" == *":${NODE_COREDNS_VERSION}" ]] ||
    die "kubeadm ${KUBERNETES_VERSION} asks for ${COREDNS_TAG}, not CoreDNS ${NODE_COREDNS_VERSION}: set NODE_COREDNS_VERSION in ${PINS}"
unless_present "${OUT}/archives/etcd.tar" "image etcd ${NODE_ETCD_VERSION}" \
    component_image etcd "${ETCD_TAG}" scratch "${OUT}/bin/etcd"
unless_present "${OUT}/archives/coredns.tar" "image coredns ${NODE_COREDNS_VERSION}" \
    component_image coredns "${COREDNS_TAG}" scratch "${OUT}/bin/coredns"
LOCAL_PATH_IMAGE="localhost/society/local-path-provisioner:${NODE_LOCAL_PATH_VERSION}"
LOCAL_PATH_HELPER="localhost/society/local-path-helper:${COMPONENT_BASE##*:}"
unless_present "${OUT}/archives/local-path-provisioner.tar" "image local-path-provisioner ${NODE_LOCAL_PATH_VERSION}" \
    component_image local-path-provisioner "${LOCAL_PATH_IMAGE}" scratch "${OUT}/bin/local-path-provisioner"
# local-path's helper pod runs sh, mkdir, rm: the component rootfs has them.
helper_image() {
    podman tag "${COMPONENT_BASE}" "${LOCAL_PATH_HELPER}"
    podman save --format docker-archive -o "${OUT}/archives/local-path-helper.tar.tmp" "${LOCAL_PATH_HELPER}"
    mv "${OUT}/archives/local-path-helper.tar.tmp" "${OUT}/archives/local-path-helper.tar"
    podman rmi "${LOCAL_PATH_HELPER}"
}
unless_present "${OUT}/archives/local-path-helper.tar" "image local-path helper" helper_image
unless_present "${OUT}/archives/kube-router.tar" "image kube-router ${KUBE_ROUTER_VERSION}" \
    component_image kube-router "${KUBE_ROUTER_IMAGE}" "${COMPONENT_BASE}" "${CP_DIR}/bin/kube-router"
# containerd's sandbox image in kind's containerd config
PAUSE_IMAGE="$(sed -n 's/^[[:space:]]*sandbox_image = "\(.*\)"/\1/p' "${KIND_DIR}/images/base/files/etc/containerd/config.toml")"
[[ -n "${PAUSE_IMAGE}" ]] || die "no sandbox_image in kind ${KIND_VERSION}'s containerd config"
unless_present "${OUT}/archives/pause.tar" "image pause (${PAUSE_IMAGE})" \
    component_image pause "${PAUSE_IMAGE}" scratch "${OUT}/bin/pause"

# --- the node image ------------------------------------------------------------------------
BUILDER="society-kind-node-build-${KEY}"
# local-path-provisioner's own manifest from its module, as kind's default storage: the local
# images, kind's path (/var/local-path-provisioner) and kind's default class name (standard).
default_storage() {
    local manifest
    manifest="$(module_dir "github.com/rancher/local-path-provisioner@${NODE_LOCAL_PATH_VERSION}")/deploy/local-path-storage.yaml"
    grep -q "^  name: local-path$" "${manifest}" || die "no StorageClass local-path in ${manifest}"
    sed -e "s#image: rancher/local-path-provisioner:.*#image: ${LOCAL_PATH_IMAGE}#" \
        -e "s#image: busybox#image: ${LOCAL_PATH_HELPER}#" \
        -e "s#/opt/local-path-provisioner#/var/local-path-provisioner#" \
        -e 's#^  name: local-path$#  name: standard\n  annotations:\n    storageclass.kubernetes.io/is-default-class: "true"#' \
        "${manifest}"
}
node_image() {
    local ctx="${OUT}/src/ctx-node"
    rm -rf "${ctx}" && mkdir -p "${ctx}/bin"
    cp -r "${KIND_DIR}/images/base/files" "${ctx}/kind-files"
    chmod -R u+w "${ctx}/kind-files"
    cp "${CP_DIR}"/bin/{containerd,ctr,containerd-shim-runc-v2,kubelet} "${OUT}"/bin/{kubeadm,kubectl} "${ctx}/bin/"
    sed "s#\"@KUBE_ROUTER_IMAGE@\"#\"${KUBE_ROUTER_IMAGE}\"#" "${REPO_ROOT}/kind/node-image/kube-router.yaml" >"${ctx}/default-cni.yaml"
    default_storage >"${ctx}/default-storage.yaml"
    podman build --network=none --build-arg "BASE=${NODE_BASE}" \
        --build-arg "KUBERNETES_VERSION=${KUBERNETES_VERSION}" \
        -f "${REPO_ROOT}/kind/node-image/Containerfile" -t "${IMAGE}-build" "${ctx}"
    rm -rf "${ctx}"
    # Import the component images into the node's containerd, run in a build container, then
    # stop it and drop its runtime state before the commit.
    podman rm -f "${BUILDER}" >/dev/null 2>&1 || true
    podman run -d --name "${BUILDER}" --privileged --network=none \
        --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
        -v "${OUT}/archives:/archives:ro" --entrypoint sleep "${IMAGE}-build" infinity
    podman exec -d "${BUILDER}" /usr/local/bin/containerd
    local _ archive
    for _ in $(seq 1 60); do
        podman exec "${BUILDER}" ctr version >/dev/null 2>&1 && break
        sleep 1
    done
    for archive in "${OUT}"/archives/*.tar; do
        podman exec "${BUILDER}" ctr -n k8s.io images import --no-unpack --all-platforms --digests \
            --label=io.cri-containerd.pinned=pinned "/archives/$(basename "${archive}")"
    done
    podman exec "${BUILDER}" ctr -n k8s.io images ls -q
    podman exec "${BUILDER}" sh -c 'pkill -x containerd; while pgrep -x containerd; do sleep 0.2; done
        rm -rf /run/containerd /run/nri'
    podman commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
        --change 'CMD []' "${BUILDER}" "${IMAGE}"
    podman rm -f -t 0 "${BUILDER}"
    podman rmi "${IMAGE}-build"
}
image_step "${IMAGE}" "node image ${IMAGE}" node_image
# Node images of older pins go (one that a kind cluster still uses stays).
podman images --format '{{.Repository}}:{{.Tag}}' localhost/society/kind-node |
    grep -vxF "${IMAGE}" | xargs -r podman rmi >/dev/null 2>&1 || true
log "node image ready in $((SECONDS - START))s ($(podman image inspect --format '{{.Size}}' "${IMAGE}" | awk '{printf "%d MB", $1 / 1000000}'))"
echo "${IMAGE}" >"${OUT}/image.txt"
echo "${IMAGE}"
