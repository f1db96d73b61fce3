"""Fixtures for tests on the harness's real worker node (``cp_node``): pods that really run.

The node needs root (network namespace, mounts, cgroups), Go (the control plane and node
programs) and Debian's runc, CNI plugins, iptables, ipset, nftables, podman and mmdebstrap
(scripts/install-node.sh). Missing any of them skips these tests on a developer's machine
and fails them when CI is set: they cannot skip in CI.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest
from controlplane import ControlPlane, Images, build_control_plane, find_go, wait_until
from cp_build import build_images

NEEDS = (
    "the real-node tests need root, Go >= 1.26 and the Debian packages of "
    "scripts/install-node.sh (runc, containernetworking-plugins, iptables, ipset, nftables, "
    "podman, mmdebstrap)"
)


def node_prerequisites() -> list[str]:
    """What this machine lacks for a real node (empty when it has everything)."""
    missing = [] if os.geteuid() == 0 else ["root"]
    missing += [] if find_go() else ["go"]
    missing += [t for t in ("runc", "podman", "mmdebstrap", "ipset", "nft") if not shutil.which(t)]
    missing += [] if os.path.exists("/usr/lib/cni/ptp") else ["containernetworking-plugins"]
    return missing


def require_node() -> None:
    missing = node_prerequisites()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and this machine lacks {', '.join(missing)}: {NEEDS}")
        pytest.skip(f"missing {', '.join(missing)}: {NEEDS}")


@pytest.fixture(scope="session")
def node_images() -> Images:
    """The images of scripts/build-images.sh (built or brought up to date once per session)."""
    require_node()
    return Images.load(build_images())


@pytest.fixture(scope="session")
def node_plane(node_images: Images) -> Iterator[ControlPlane]:
    """A control plane with one real node (and one KWOK node, tainted off real pods)."""
    build = build_control_plane()
    keep = os.environ.get("SOCIETY_CONTROL_PLANE_KEEP") == "1"
    with ControlPlane(
        build, nodes=1, real_node=True, images=node_images, keep_workdir=keep
    ) as plane:
        yield plane


@pytest.fixture
def node_namespace(node_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace on the node's plane, deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(node_plane.api_client())
    name = f"node-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_until(
        f"the default ServiceAccount in {name}",
        lambda: core.read_namespaced_service_account("default", name),
        timeout=30,
    )
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def control_plane(node_plane: ControlPlane) -> ControlPlane:
    """Under tests/kubernetes/node the shared helpers (``cluster_support``'s queues) get the
    plane with the real node."""
    return node_plane
