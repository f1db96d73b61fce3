"""The real ``SocietyRun`` workflow on a real Temporal dev server, profile ``kubernetes``, against
the real-pod tests' kind cluster, in the named debugging mode (``SOCIETY_CONTROLLER_JOB=0``):
prepare makes the namespace, the controller runs in the execute activity of this process,
outside the cluster, and the agents' pods on the node reach its router through the run's
selector-less Service, whose one endpoint is ``SOCIETY_ROUTER_ADDRESS`` (this machine's address
on the cluster's podman network, as a laptop's on kind's network). Cleanup deletes the namespace
and waits until it is gone.

The activities are the real ``LifecycleActivities`` (the kernel loads the module late through
``execute_run``); nothing is substituted.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    SCRIPTED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
)
from k8s_run_support import MODULE, run_society, temporal_address  # noqa: F401 (fixture)
from kind_plane import KindPlane
from temporalio import activity

from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.workflow import EXECUTE
from controller.platforms.kubernetes import Kube, objects
from controller.platforms.kubernetes.kube import Informer
from controller.run import RunRequest, RunResult
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_society_run_prepares_the_namespace_runs_the_controller_and_cleanup_deletes_it(
    control_plane: KindPlane,
    cluster_queue: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=SCRIPTED)))
    root = artifacts(tmp_path)
    # what the run worker's environment says: this cluster, and the worker owns namespaces
    monkeypatch.setenv("SOCIETY_KUBECONFIG", str(control_plane.kubeconfig))
    monkeypatch.setenv("SOCIETY_CLUSTER_QUEUE", cluster_queue)
    monkeypatch.setenv("SOCIETY_KUBE_WORKER_NAMESPACES", "1")
    # the named debugging mode: the controller runs in this process, outside the cluster, and
    # the pods reach it at this machine's address on the kind cluster's podman network
    assert control_plane.network is not None and control_plane.images is not None
    monkeypatch.setenv("SOCIETY_CONTROLLER_JOB", "0")
    monkeypatch.setenv("SOCIETY_ROUTER_ADDRESS", control_plane.network.host_ip)
    monkeypatch.setenv("SOCIETY_IMAGE_MAP", str(control_plane.images.path))
    monkeypatch.setenv("SOCIETY_STARTUP_TIMEOUT_S", "90")
    seen: dict[str, Any] = {}

    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        activities = LifecycleActivities()

        @activity.defn(name=EXECUTE)
        async def execute(request: RunRequest) -> RunResult:
            seen["owner before execute"] = await kube.get("ConfigMap", objects.OWNER, run_id)
            pods = Informer(kube, "Pod", run_id, label_selector=f"{objects.ROLE_LABEL}=agent")
            placed: dict[str, str] = {}

            def note(informer: Informer) -> None:  # each agent pod's node, as it is bound
                for pod in informer.objects.values():
                    if pod["spec"].get("nodeName"):
                        agent = pod["metadata"]["labels"][objects.AGENT_LABEL]
                        placed[agent] = pod["spec"]["nodeName"]

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(pods.run)
                tasks.start_soon(pods.until, note)
                result = await activities.execute(request)
                seen["agent pods"] = placed
                tasks.cancel_scope.cancel()
            seen["namespace after execute"] = await kube.get("Namespace", run_id)
            return result

        request = RunRequest(
            module_path=str(module), run_id=run_id, profile="kubernetes", artifact_root=str(root)
        )
        result = await run_society(temporal_address, request, activities, execute)
        left = await left_in_cluster(kube, run_id)

    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    # prepare made the namespace and its owner before the controller started ...
    assert seen["owner before execute"] is not None
    # ... the controller left it standing ...
    assert seen["namespace after execute"] is not None
    # ... and cleanup deleted it and waited until it was gone before the workflow returned
    assert left == []
    # the agents ran in real pods on kind
    assert control_plane.node is not None
    node = control_plane.node.name
    assert seen["agent pods"] == {"alice": node, "bob": node}
    assert outcome.receipt.complete
