"""Fixtures and helpers for the kubernetes platform's tests (import the fixtures by name).

A ClusterQueue per quota, a platform for a run whose controller is the test's own process, and
a recorder of what the cluster saw in order. On the kind plane (tests/kubernetes/node) the
agents' pods run there and reach this process at its address on the cluster's podman network, as
pods on kind reach a laptop: the out-of-cluster debugging mode (``SOCIETY_CONTROLLER_JOB=0``,
``router_address``). On KWOK's fake nodes (the other tests under tests/kubernetes) pods run
nothing, so no run there passes its readiness gate.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from plane import Plane, wait_until

from controller.platforms.kubernetes import Kube, KubernetesPlatform, KubernetesSettings, objects
from controller.platforms.kubernetes.kube import Informer, is_true

KUEUE = ("kueue.x-k8s.io", "v1beta2")
PINNED = "registry.invalid/society/scripted@sha256:" + "0" * 63 + "1"
"""A digest-pinned reference for the scripted runtime: KWOK pulls nothing, the digest is a
stand-in for an image built from agent_images/python/Dockerfile."""
SCRIPTED = "society/scripted:dev"
"""The scripted runtime's name in the image map (scripts/build-images.sh): what the real node runs,
pinned by digest through the map at submit time."""
RUN_KINDS = (
    "Sandbox",
    "Workload",
    "LocalQueue",
    "Secret",
    "Service",
    "ConfigMap",
    "Pod",
    "RoleBinding",
    "NetworkPolicy",  # a claiming run's policy in the warm namespace
)


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return "asyncio"


def make_cluster_queue(plane: Plane, *, cpu: str, memory: str = "16Gi") -> str:
    """A ResourceFlavor and a ClusterQueue with this quota, for any namespace; returns its name."""
    from kubernetes import client

    custom = client.CustomObjectsApi(plane.api_client())
    group, version = KUEUE
    suffix = uuid.uuid4().hex[:8]
    flavor, queue = f"flavor-{suffix}", f"cq-{suffix}"
    flavor_object = {"apiVersion": f"{group}/{version}", "kind": "ResourceFlavor"}
    custom.create_cluster_custom_object(
        group, version, "resourceflavors", {**flavor_object, "metadata": {"name": flavor}}
    )
    custom.create_cluster_custom_object(
        group,
        version,
        "clusterqueues",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "ClusterQueue",
            "metadata": {"name": queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": cpu},
                                    {"name": "memory", "nominalQuota": memory},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )

    def active() -> bool:
        obj = custom.get_cluster_custom_object(group, version, "clusterqueues", queue)
        return is_true(obj, "Active")

    wait_until(f"ClusterQueue {queue} Active", active, timeout=30)
    return queue


@pytest.fixture(scope="module")
def cluster_queue(control_plane: Plane) -> Iterator[str]:
    """A ClusterQueue with room for 50 scripted agents and more."""
    yield make_cluster_queue(control_plane, cpu="8")


@pytest.fixture(scope="module")
def small_queue(control_plane: Plane) -> Iterator[str]:
    """A ClusterQueue with room for two scripted agents (20m each), not three."""
    yield make_cluster_queue(control_plane, cpu="50m")


def settings(plane: Plane, **changes: Any) -> KubernetesSettings:
    """Settings for a controller in this process; on kind, the image map and the address where
    the pods reach this process (this machine's on the cluster's podman network)."""
    base: dict[str, Any] = {
        "kubeconfig": str(plane.kubeconfig),
        "startup_timeout_s": 90.0,
        "admission_timeout_s": 60.0,
    }
    base |= getattr(plane, "placement", {})  # KWOK's fake nodes: the agents' pods go there
    network = getattr(plane, "network", None)  # the kind plane's; KWOK pods run nothing
    if network is not None:
        base |= {
            "image_map": str(plane.images.path),
            "controller_job": False,
            "router_address": network.host_ip,
        }
    return KubernetesSettings(**(base | changes))


@dataclass
class ClusterRecord:
    """What the cluster showed during a run, in the order the test saw it."""

    seen: list[tuple[float, str, str]] = field(default_factory=list)

    def first(self, what: str) -> float | None:
        return next((t for t, kind, _ in self.seen if kind == what), None)

    def all(self, what: str) -> list[float]:
        return [t for t, kind, _ in self.seen if kind == what]


@asynccontextmanager
async def recording(kube: Kube, run_id: str) -> AsyncIterator[ClusterRecord]:
    """Record when the Workload was first admitted and when each Sandbox first appeared."""
    record = ClusterRecord()
    noted: set[tuple[str, str]] = set()

    def note(kind: str, name: str) -> None:
        if (kind, name) not in noted:
            noted.add((kind, name))
            record.seen.append((time.monotonic(), kind, name))

    async def follow(informer: Informer) -> None:
        await informer.synced.wait()
        while True:
            changed = informer._changed
            for name, obj in informer.objects.items():
                if informer.kind == "Sandbox":
                    note("sandbox", name)
                elif is_true(obj, "Admitted"):
                    note("admitted", name)
            await changed.wait()

    async with anyio.create_task_group() as tasks:
        for kind in ("Sandbox", "Workload"):
            informer = Informer(kube, kind, run_id, label_selector=objects.run_selector(run_id))
            tasks.start_soon(informer.run)
            tasks.start_soon(follow, informer)
        try:
            yield record
        finally:
            tasks.cancel_scope.cancel()


@asynccontextmanager
async def on_cluster(
    plane: Plane, run_id: str, **platform_settings: Any
) -> AsyncIterator[tuple[KubernetesPlatform, Kube, ClusterRecord]]:
    """A platform for ``run_id`` with its controller in this process, an admin client and a
    record of the run's cluster objects."""
    async with (
        Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube,
        recording(kube, run_id) as record,
    ):
        yield KubernetesPlatform(settings(plane, **platform_settings)), kube, record


async def left_in_cluster(kube: Kube, run_id: str) -> list[str]:
    """Everything labelled as the run's, in any namespace, plus its namespace if it exists."""
    found = []
    if await kube.get("Namespace", run_id) is not None:
        found.append(f"Namespace/{run_id}")
    for kind in RUN_KINDS:
        items, _ = await kube.list(kind, None, label_selector=objects.run_selector(run_id))
        found += [f"{kind}/{item['metadata']['name']}" for item in items]
    return found


def artifacts(tmp_path: Path) -> Path:
    root = tmp_path / "artifacts"
    root.mkdir()
    return root
