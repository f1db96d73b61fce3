#!/usr/bin/env bash
# Idempotent install of the Debian packages the test harness's real Kubernetes node and the
# image build need (tests/kubernetes/cp_node.py, scripts/build-images.sh):
#   runc                         the OCI runtime containerd and podman use (crun refuses this
#                                host's hybrid cgroups)
#   containernetworking-plugins  the CNI plugins (ptp, host-local, loopback, portmap)
#   iptables ipset               kube-router's NetworkPolicy enforcement
#   nftables conntrack           kube-proxy in nftables mode
#   podman mmdebstrap            building the images from a locally made Debian base
# Needs root and Debian's apt. Does nothing when everything is already there.
set -euo pipefail

packages=(runc containernetworking-plugins iptables ipset nftables conntrack podman mmdebstrap)
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "${package}" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("${package}")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if [[ ${EUID} -ne 0 ]]; then
    echo "install-node: ERROR: ${missing[*]} missing and not root; install them with apt-get" >&2
    exit 1
fi
start=${SECONDS}
echo "install-node: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_options=(-y -qq --no-install-recommends -o DPkg::Lock::Timeout=600)
apt-get update -qq -o DPkg::Lock::Timeout=600 >/dev/null
apt-get install "${apt_options[@]}" "${missing[@]}" >/dev/null
echo "install-node: installed in $((SECONDS - start))s" >&2
