"""``society cluster up --profile kind --existing-kubeconfig`` (the path for a cluster that
exists: nothing created, Kueue and Agent Sandbox checked rather than installed, the images
imported into the agents' node's containerd, Temporal at a NodePort of the node) against the
real-pod tests' kind cluster, then ``society run examples/negotiation.py --profile
kind`` runs with no ``SOCIETY_*`` or ``TEMPORAL_*`` variable on the Temporal that ``up`` started
in the cluster, its run directory comes home to the artifact root from the ledger's retained
volume and verifies there, a second ``up`` changes nothing, and ``down`` leaves nothing behind.

The ledgers' StorageClass is one statically made hostPath volume in the plane's work directory,
which kind's ``extraMounts`` maps into the node at its own path (``--ledger-volumes``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cp_build import REPO_ROOT
from kind_plane import AGENT_POOL, KindPlane

from controller.ops.cluster import install, temporal
from controller.ops.cluster.queue_size import quantity
from controller.platforms.kubernetes import objects

pytestmark = pytest.mark.slow

SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def _clean_environment(plane: KindPlane) -> dict[str, str]:
    """The caller's environment without any run setting, with ``ctr`` on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SOCIETY_", "TEMPORAL_")) and k != "KUBECONFIG"
    }
    env["PATH"] = f"{plane.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def _society(env: dict[str, str], *args: str, timeout: float = 600) -> Any:
    return subprocess.run(
        [*SOCIETY, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


async def _ensure_run_roles(plane: KindPlane) -> None:
    from controller.platforms.kubernetes.kube import Kube
    from controller.platforms.kubernetes.namespace import ensure_run_roles

    async with Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube:
        await ensure_run_roles(kube)


def _workflow_status(address: str, run_id: str) -> str:
    """The run's workflow as the in-cluster Temporal knows it."""
    from temporalio.client import Client

    async def describe() -> str:
        client = await Client.connect(address)
        return str((await client.get_workflow_handle(run_id).describe()).status.name)

    return asyncio.run(describe())


@contextmanager
def ledger_volumes(plane: KindPlane) -> Iterator[tuple[str, Path]]:
    """A ``Retain`` StorageClass with one static hostPath volume in a directory of its own;
    yields the class and that directory (the nodes' volume root)."""
    from kubernetes import client

    assert plane.workdir is not None
    name = f"ledgers-{uuid.uuid4().hex[:8]}"
    root = plane.workdir / name
    directory = root / "volume-0"
    directory.mkdir(parents=True)
    os.chown(directory, objects.NON_ROOT_ID, objects.NON_ROOT_ID)  # hostPath: no fsGroup
    api = plane.api_client()
    storage, core = client.StorageV1Api(api), client.CoreV1Api(api)
    storage.create_storage_class(
        {"metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
         "reclaimPolicy": "Retain", "volumeBindingMode": "Immediate"}
    )  # fmt: skip
    core.create_persistent_volume(
        {"metadata": {"name": name},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": name,
                  "hostPath": {"path": str(directory), "type": "Directory"}}}
    )  # fmt: skip
    try:
        yield name, root
    finally:
        core.delete_persistent_volume(name)
        storage.delete_storage_class(name)


def test_cluster_up_then_a_run_with_no_environment_then_down_leaves_nothing(
    node_plane: KindPlane, tmp_path: Path
) -> None:
    with ledger_volumes(node_plane) as (storage_class, volumes):
        _up_run_down(node_plane, tmp_path, storage_class, volumes)


def _up_run_down(node_plane: KindPlane, tmp_path: Path, storage_class: str, volumes: Path) -> None:
    from kubernetes import client

    assert node_plane.node is not None
    env = _clean_environment(node_plane)
    artifacts = tmp_path / "artifacts"
    socket = str(node_plane.node.containerd_socket)
    up = [
        "cluster", "up", "--profile", "kind", "--artifacts", str(artifacts),
        "--existing-kubeconfig", str(node_plane.kubeconfig),
        "--agent-nodes", "=".join(AGENT_POOL), "--node-containerd", socket,
        "--ledger-storage-class", storage_class, "--ledger-volumes", str(volumes),
    ]  # fmt: skip
    # An administrator ran a run before `up`: its out-of-cluster prepare installed the run
    # ClusterRoles, which the chart must adopt rather than refuse.
    asyncio.run(_ensure_run_roles(node_plane))
    first = _society(env, *up)
    assert first.returncode == 0, first.stderr[-4000:]
    progress = first.stderr
    for step in ("cluster", "local registry", "kueue v", "agent sandbox v", "images",
                 "temporal dev server", "agents queue size", "ledger volumes", "chart",
                 "profile file"):  # fmt: skip
        assert f"] {step}" in progress, progress
    assert "skipped (--existing-kubeconfig" in progress and "checked, not installed" in progress
    profile_file = Path(first.stdout.strip().splitlines()[-1])
    profile = json.loads(profile_file.read_text())
    assert profile_file == artifacts / ".cluster" / "kind.json"
    assert profile["temporalAddress"].endswith(f":{temporal.GRPC_NODE_PORT}")
    assert profile["existingCluster"] is True and profile["imported"][socket]
    assert profile["ledgerStorageClass"] == storage_class

    api = node_plane.api_client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    custom = client.CustomObjectsApi(api)
    temporal_pods = core.list_namespaced_pod(
        install.SYSTEM_NAMESPACE, label_selector=f"app.kubernetes.io/name={temporal.NAME}"
    ).items
    assert [p.spec.node_name for p in temporal_pods] == [node_plane.node.name]
    worker = apps.read_namespaced_deployment("society-run-worker", install.SYSTEM_NAMESPACE)
    assert worker.status.available_replicas == 1  # the chart's run worker runs on the node
    queue = custom.get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", "society-agents"
    )
    node = core.read_node(node_plane.node.name)
    quota = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    # the API server stores a quantity in its canonical form ("2000m" reads back as "2")
    assert quota[0]["name"] == "cpu"
    assert quantity(quota[0]["nominalQuota"]) == quantity(node.status.allocatable["cpu"])
    assert quantity(quota[1]["nominalQuota"]) == quantity(node.status.allocatable["memory"])

    # Idempotent: a second `up` imports nothing, restarts nothing, and says so.
    second = _society(env, *up)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "imported 0 new" in second.stderr and "unchanged;" in second.stderr, second.stderr
    again = core.list_namespaced_pod(
        install.SYSTEM_NAMESPACE, label_selector=f"app.kubernetes.io/name={temporal.NAME}"
    ).items
    assert [p.metadata.uid for p in again] == [p.metadata.uid for p in temporal_pods]

    # A run with no environment: every setting comes from the profile file.
    example = REPO_ROOT / "examples" / "negotiation.py"
    run = _society(env, "run", "--profile", "kind", "--artifacts", str(artifacts), str(example))
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "ProgramFinished" and result["exit"] == "success", result
    assert f"Temporal at {profile['temporalAddress']}" in run.stderr, run.stderr
    assert not (artifacts / ".temporal").exists()  # no local dev server was started
    assert _workflow_status(profile["temporalAddress"], result["runId"]) == "COMPLETED"
    # The run directory came home from the ledger's retained volume, and verifies here.
    home = artifacts / result["runId"]
    assert Path(result["ledger"]).is_relative_to(home), result
    assert f"copied the run directory home to {home}" in run.stderr, run.stderr
    assert (volumes / "volume-0" / result["runId"] / "ledger").is_dir()  # the volume keeps it
    # Signed in the cluster with the operator key `up` made, from a per-run Secret.
    operator = Path(profile["signingKey"])
    assert operator.stat().st_mode & 0o777 == 0o600
    pinned = operator.with_suffix(".pub")
    verify = _society(env, "ledger", "verify", result["ledger"], "--trusted-key", str(pinned),
                      timeout=120)  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    verified = json.loads(verify.stdout.splitlines()[-1])
    assert verified["valid"] is True and verified["signature"] == "pinned", verified

    # Down removes all of it: release, Temporal, namespaces, queues, images, the profile file.
    down = _society(env, "cluster", "down", "--profile", "kind", "--artifacts", str(artifacts))
    assert down.returncode == 0, down.stderr[-4000:]
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert not names & {install.SYSTEM_NAMESPACE, install.CREDENTIALS_NAMESPACE}, names
    for plural in ("clusterqueues", "resourceflavors"):
        left = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural)["items"]
        assert not [o for o in left if o["metadata"]["name"] == "society-agents"], left
    policies = client.AdmissionregistrationV1Api(api).list_validating_admission_policy().items
    assert not [p for p in policies if "society" in p.metadata.name], policies
    assert not profile_file.exists()
    kept = {p.name for p in (artifacts / ".cluster").iterdir()}
    assert kept == {operator.name, pinned.name}, kept  # the key its ledgers verify with
    present = node_plane.node.ctr("images", "ls", "-q").split()
    assert not set(profile["imported"][socket]) & set(present)
