"""Fixtures for tests against a real local Kubernetes control plane (see controlplane.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from controlplane import ControlPlane, build_control_plane, find_go, wait_until
from roster_scale import SCALE_NODE_CAPACITY

ENABLE_HINT = (
    "the Kubernetes control-plane tests need Go >= 1.26 on PATH (they build etcd, "
    "kube-apiserver, KWOK, Kueue and Agent Sandbox with scripts/build-control-plane.sh)"
)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A started control plane shared by the session: 2 KWOK nodes of 1,100 pods each, Kueue,
    Agent Sandbox.

    Skips when `go` is missing, except under CI (env CI set), where it fails instead.
    SOCIETY_CONTROL_PLANE_KEEP=1 keeps the work directory (logs, kubeconfig) afterwards.
    """
    if find_go() is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and 'go' is not on PATH: {ENABLE_HINT}")
        pytest.skip(f"'go' is not on PATH: {ENABLE_HINT}")
    build = build_control_plane()
    keep = os.environ.get("SOCIETY_CONTROL_PLANE_KEEP") == "1"
    # Room for test_roster_admission's 1,000 pods.
    capacity = SCALE_NODE_CAPACITY
    with ControlPlane(build, nodes=2, node_capacity=capacity, keep_workdir=keep) as plane:
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(control_plane.api_client())
    name = f"test-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_until(
        f"the default ServiceAccount in {name}",
        lambda: core.read_namespaced_service_account("default", name),
        timeout=30,
    )
    yield name
    core.delete_namespace(name)
