"""In-cluster execution: the run worker's ``execute`` runs the controller as the run's Job.

The real ``SocietyRun`` on a dev server, with the worker in in-cluster mode
(``SOCIETY_CONTROLLER_JOB=1``) against the real control plane: prepare makes the namespace, execute
creates the RunSpec ConfigMap and ``Job/society-controller`` and watches it, the controller
(``incluster.run_controller``, the same ``execute_run`` as out of cluster) runs as the Job's pod,
creates the Sandboxes, reports its ``RunResult`` in its termination message, and cleanup
deletes the namespace. Test-only substitution: ``pod_processes`` runs the Job's pod as a local
process (with a token of the controller's ServiceAccount) and, inside it, the agents' pods.
"""

# ruff: noqa: F811  (pytest fixtures imported from other modules are parameters here)
from __future__ import annotations

import os
import signal
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    PINNED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
)
from controlplane import ControlPlane
from pod_processes import PodProcesses
from temporalio import activity
from test_kubernetes_temporal import MODULE, run_society, temporal_address  # noqa: F401 (fixture)

from controller.platform.kubernetes import (
    Kube,
    KubernetesSettings,
    delete_run_namespace,
    objects,
    prepare_run_namespace,
    run_controller_job,
)
from controller.platform.kubernetes.access import CONTROLLER_JOB
from controller.platform.kubernetes.kube import Informer
from controller.platform.temporal.activities import LifecycleActivities
from controller.platform.temporal.workflow import EXECUTE
from controller.run import RunRequest, RunResult
from controller.run.module_source import ModuleSource
from controller.run.runid import new_run_id
from controller.run.spec import load_run_spec
from ledger import open_ledger_artifacts

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CONTROLLER_IMAGE = "registry.invalid/society/controller@sha256:" + "0" * 63 + "2"
NODE_LABEL = "society.test/controller-node"


@pytest.fixture(scope="module")
async def controller_node(control_plane: ControlPlane) -> AsyncIterator[str]:
    """A Ready node KWOK does not manage (KWOK completes Job pods on its own nodes at once);
    ``pod_processes`` is its kubelet for the controller Job's pod."""
    name = f"controller-{uuid.uuid4().hex[:8]}"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {NODE_LABEL: name}},
    }
    resources = {"cpu": "4", "memory": "8Gi", "pods": "20"}
    status = {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        await kube._request("POST", "/api/v1/nodes", body=node)
        await kube._request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )
        try:
            yield name
        finally:
            await kube._request("DELETE", f"/api/v1/nodes/{name}")


async def kube_pod_named(kube: Kube, run_id: str) -> str:
    """The name of the controller Job's pod, once it exists."""
    informer = Informer(kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}=controller")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(informer.run)
        name = await informer.until(lambda i: next(iter(i.objects), None))
        tasks.cancel_scope.cancel()
    return name


def in_cluster_worker(
    monkeypatch: pytest.MonkeyPatch, plane: ControlPlane, cluster_queue: str, node: str
) -> None:
    """The run worker's environment: this cluster, worker-owned namespaces, controller Jobs."""
    monkeypatch.setenv("SOCIETY_KUBECONFIG", str(plane.kubeconfig))
    monkeypatch.setenv("SOCIETY_CLUSTER_QUEUE", cluster_queue)
    monkeypatch.setenv("SOCIETY_KUBE_WORKER_NAMESPACES", "1")
    monkeypatch.setenv("SOCIETY_CONTROLLER_JOB", "1")
    monkeypatch.setenv("SOCIETY_CONTROLLER_IMAGE", CONTROLLER_IMAGE)
    monkeypatch.setenv("SOCIETY_STARTUP_TIMEOUT_S", "90")
    monkeypatch.setenv("SOCIETY_ADMISSION_TIMEOUT_S", "60")
    monkeypatch.setenv("SOCIETY_CONTROLLER_NODE_SELECTOR", f"{NODE_LABEL}={node}")


async def test_society_run_in_cluster_runs_the_controller_as_a_job_and_returns_its_result(
    control_plane: ControlPlane,
    cluster_queue: str,
    controller_node: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=PINNED)))
    root = artifacts(tmp_path)
    in_cluster_worker(monkeypatch, control_plane, cluster_queue, controller_node)
    seen: dict[str, Any] = {}

    async with (
        Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube,
        PodProcesses.running(
            kube,
            run_id,
            role="controller",
            artifact_root=root,
            admin_kubeconfig=str(control_plane.kubeconfig),
            node=controller_node,
        ) as controllers,
    ):
        activities = LifecycleActivities()

        @activity.defn(name=EXECUTE)
        async def execute(request: RunRequest) -> RunResult:
            result = await activities.execute(request)
            seen["job"] = await kube.get("Job", CONTROLLER_JOB, run_id)
            seen["runspec"] = await kube.get("ConfigMap", "society-runspec", run_id)
            return result

        request = RunRequest(
            module_path=str(module),
            module_source=ModuleSource.read(module),  # a cluster's worker reads no local path
            run_id=run_id,
            profile="kubernetes",
            artifact_root=str(root),
        )
        result = await run_society(temporal_address, request, activities, execute)
        left = await left_in_cluster(kube, run_id)

    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    job = seen["job"]
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == CONTROLLER_IMAGE
    assert seen["runspec"]["immutable"] is True
    assert seen["runspec"]["data"]["experiment.py"] == module.read_text()
    # the Job ran once: one pod, one controller process
    assert [entry.returncode for entry in controllers.started.values()] == [0]
    # the ledger the controller wrote (the artifacts volume) verifies offline
    spec = load_run_spec(str(module))
    assert outcome.receipt.complete
    ledger = open_ledger_artifacts(
        spec.catalog,
        outcome.receipt.ledger_dir,
        expected_definition_id=spec.id,
        trusted_key=outcome.receipt.public_key,
    )
    assert ledger is not None
    assert Path(outcome.receipt.ledger_dir).is_relative_to(root)
    # cleanup deleted the namespace (and with it the Job) before the workflow returned
    assert left == []


async def test_a_controller_job_that_dies_before_reporting_ends_the_run_cluster_lost(
    control_plane: ControlPlane,
    cluster_queue: str,
    controller_node: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=PINNED)))
    root = artifacts(tmp_path)
    in_cluster_worker(monkeypatch, control_plane, cluster_queue, controller_node)
    request = RunRequest(
        module_path=str(module),
        module_source=ModuleSource.read(module),
        run_id=run_id,
        profile="kubernetes",
        artifact_root=str(root),
    )

    async with (
        Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube,
        PodProcesses.running(
            kube,
            run_id,
            role="controller",
            artifact_root=root,
            admin_kubeconfig=str(control_plane.kubeconfig),
            node=controller_node,
        ) as controllers,
    ):
        await prepare_run_namespace(kube, run_id)
        try:

            async def kill_the_controller() -> None:
                pod = await kube_pod_named(kube, run_id)
                await controllers._event(pod).wait()  # set once its process started
                entry = controllers.started[pod]
                assert entry.process is not None
                os.killpg(entry.process.pid, signal.SIGKILL)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(kill_the_controller)
                with anyio.fail_after(60):
                    outcome = await run_controller_job(
                        request, KubernetesSettings.from_environment()
                    )
        finally:
            await delete_run_namespace(kube, run_id)

    assert outcome.outcome == "ClusterLost" and outcome.exit == "failure"
    assert outcome.reason == "controller-job-failed", outcome.cause
    assert "exited 137" in (outcome.cause or ""), outcome.cause
    assert not outcome.receipt.complete
