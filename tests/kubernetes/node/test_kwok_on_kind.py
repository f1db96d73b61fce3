"""KWOK inside the kind cluster (tests/kubernetes/kind_kwok.py): fake nodes turn Ready, a pod
placed on them turns Running without a container, a pod that only selects them without
tolerating their taint is refused by the scheduler (nothing lands there by accident), and a
roster submitted to the kubernetes platform with the nodes' placement settings runs there, each
Sandbox Ready. benchmarks/k8s_admission_bench.py --plane kind times the same at 1,000 agents.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import make_cluster_queue
from kind_kwok import KwokPlane, NodeCapacity, start_kwok, stop_kwok
from kind_plane import KindPlane
from roster_scale import scale_queue_quota, start_roster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kwok(node_plane: KindPlane) -> Iterator[KwokPlane]:
    plane = start_kwok(node_plane.cluster, 1, NodeCapacity(pods="200"))
    try:
        yield plane
    finally:
        stop_kwok(plane)


def _pod(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    container = {"name": "main", "image": "localhost/society/never-pulled:1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container], **spec},
    }


def _wait_for(what: str, read: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = read()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f}s")
        time.sleep(0.5)


def test_placed_pod_runs_on_a_fake_node_and_an_untolerated_one_is_refused(
    kwok: KwokPlane, node_namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(kwok.api_client())
    core.create_namespaced_pod(node_namespace, _pod("placed", node_namespace, kwok.pod_placement))
    selector_only = {"nodeSelector": kwok.pod_placement["nodeSelector"]}
    core.create_namespaced_pod(node_namespace, _pod("untolerated", node_namespace, selector_only))

    def running() -> Any:
        pod = core.read_namespaced_pod("placed", node_namespace)
        return pod if pod.status.phase == "Running" else None

    placed = _wait_for("the placed pod Running", running)
    assert placed.spec.node_name in kwok.node_names
    assert placed.status.pod_ip, "KWOK gives the pod an address"

    def unschedulable() -> Any:
        pod = core.read_namespaced_pod("untolerated", node_namespace)
        return [
            c
            for c in pod.status.conditions or []
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        ]

    (condition,) = _wait_for("the untolerated pod refused by the scheduler", unschedulable)
    assert "taint" in condition.message, condition.message
    assert core.read_namespaced_pod("untolerated", node_namespace).spec.node_name is None


def test_a_roster_on_the_platform_runs_on_the_fake_nodes(kwok: KwokPlane, tmp_path: Path) -> None:
    agents = 20
    cpu, memory = scale_queue_quota(agents)
    queue = make_cluster_queue(kwok, cpu=cpu, memory=memory)
    run = anyio.run(start_roster, kwok, queue, agents, tmp_path)

    pods = run.listed["Pod"]
    assert len(pods) == agents
    assert {pod["spec"]["nodeName"] for pod in pods} <= set(kwok.node_names)
    assert all(pod["status"]["phase"] == "Running" for pod in pods)
    assert len(run.listed["Sandbox"]) == agents
