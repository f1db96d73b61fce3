#!/usr/bin/env bash
# Idempotent install of the Debian packages the kind test clusters and the image build need on
# this machine (tests/kind_cluster.py, scripts/build-kind-node-image.sh, scripts/build-images.sh):
#   runc                         the OCI runtime podman uses (crun refuses this host's hybrid
#                                cgroups)
#   containernetworking-plugins  podman's CNI plugins (kind's nodes' network)
#   iptables                     podman's port mappings and NAT
#   podman mmdebstrap            kind's node provider; building the images from a locally made
#                                Debian base
# Needs root and Debian's apt. Does nothing when everything is already there.
set -euo pipefail

packages=(runc containernetworking-plugins iptables podman mmdebstrap)
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
