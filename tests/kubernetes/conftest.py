"""Fixtures for the Kubernetes tests: one kind cluster per session (``node_plane``, whose pods
really run) and KWOK's fake nodes inside it (``control_plane``, for admission, scheduling and RBAC
at the scale of a 1,000-agent roster, where real containers would not fit).

It needs root, podman, mmdebstrap and Go (scripts/install-node.sh, scripts/install-kind.sh,
scripts/build-kind-node-image.sh, scripts/build-kind-addon-images.sh, scripts/build-images.sh).
Missing any of them skips these tests on a developer's machine and fails them when CI is set:
they cannot skip in CI. SOCIETY_CONTROL_PLANE_KEEP=1 keeps the cluster's work directory (logs,
kubeconfig) afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from cp_build import build_images, find_go
from cp_images import Images
from kind_cluster import script_output
from kind_kwok import KwokPlane, start_kwok
from kind_plane import KindPlane
from plane import Plane, wait_until
from roster_scale import SCALE_NODE_CAPACITY

NEEDS = (
    "the Kubernetes tests need root, Go >= 1.26, podman and mmdebstrap: run "
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


@pytest.fixture(scope="session")
def control_plane(node_plane: KindPlane) -> KwokPlane:
    """Two KWOK nodes of 1,100 pods each on the session's kind cluster (room for
    test_roster_admission's 1,000 pods); they go with the cluster at the session's end."""
    return start_kwok(node_plane.cluster, 2, SCALE_NODE_CAPACITY)


def _fresh_namespace(plane: Plane, prefix: str) -> Iterator[str]:
    from kubernetes import client

    core = client.CoreV1Api(plane.api_client())
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_until(
        f"the default ServiceAccount in {name}",
        lambda: core.read_namespaced_service_account("default", name),
        timeout=30,
    )
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespace(control_plane: KwokPlane) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted afterwards."""
    yield from _fresh_namespace(control_plane, "test")


@pytest.fixture
def node_namespace(node_plane: KindPlane) -> Iterator[str]:
    """A fresh namespace on the kind cluster, deleted afterwards."""
    yield from _fresh_namespace(node_plane, "node")
