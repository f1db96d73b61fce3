"""Fixtures for the real-pod tests: a kind cluster (``kind_plane``) whose pods really run.

It needs root, podman, mmdebstrap and Go (scripts/install-node.sh, scripts/install-kind.sh,
scripts/build-kind-node-image.sh, scripts/build-kind-addon-images.sh, scripts/build-images.sh).
Missing any of them skips these tests on a developer's machine and fails them when CI is set:
they cannot skip in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from controlplane import find_go, wait_until
from cp_build import build_images
from cp_images import Images
from kind_cluster import script_output
from kind_plane import KindPlane

NEEDS = (
    "the real-pod tests need root, Go >= 1.26, podman and mmdebstrap: run "
    "scripts/install-node.sh, scripts/install-kind.sh, scripts/build-kind-node-image.sh and "
    "scripts/build-kind-addon-images.sh"
)


def node_prerequisites() -> list[str]:
    """What this machine lacks for the kind cluster (empty when it has everything)."""
    missing = [] if os.geteuid() == 0 else ["root"]
    missing += [] if find_go() else ["go"]
    missing += [t for t in ("podman", "mmdebstrap") if not shutil.which(t)]
    if not missing:
        image = script_output("build-kind-node-image.sh", "--print-image")
        if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
            missing.append(f"the node image {image}")
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
def node_plane(node_images: Images) -> Iterator[KindPlane]:
    """The kind cluster with Kueue, Agent Sandbox and the project's images on its agents' node."""
    keep = os.environ.get("SOCIETY_CONTROL_PLANE_KEEP") == "1"
    with KindPlane(node_images, keep_workdir=keep) as plane:
        yield plane


@pytest.fixture
def node_namespace(node_plane: KindPlane) -> Iterator[str]:
    """A fresh namespace on the kind cluster, deleted afterwards."""
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
def control_plane(node_plane: KindPlane) -> KindPlane:
    """Under tests/kubernetes/node the shared helpers (``cluster_support``'s queues) get the
    kind cluster."""
    return node_plane
