"""The run worker, as its ServiceAccount, runs a whole run in cluster: the controller as the run's
Job and the agents' pods on kind.

Against the real control plane, with the Helm chart's RBAC and admission policies applied as
``helm install`` would (``rbac_support``). The worker runs in this process and acts as its
ServiceAccount through impersonation (``SOCIETY_KUBE_IMPERSONATE``), which the API server
authorizes and admits exactly as that ServiceAccount's own requests; the controller's pod uses
its own ServiceAccount's token, mounted by the kubelet.
"""

# ruff: noqa: F811  (pytest fixtures imported from other modules are parameters here)
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

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
from rbac_support import (  # noqa: F401 (fixture)
    CREDENTIALS,
    THE_WORKER,
    WORKER,
    worker_rights,
)
from temporalio import activity
from test_controller_job import in_cluster_worker

from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.workflow import EXECUTE
from controller.platforms.kubernetes import Kube
from controller.platforms.kubernetes.rbac import (
    CONTROLLER_ROLE,
    CREATED_BY,
    RUN_NAMESPACE_ROLE,
    WORKER_BINDING,
    credentials_binding_name,
)
from controller.run import RunRequest, RunResult
from controller.run.module_source import ModuleSource
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_the_run_worker_as_its_service_account_runs_a_whole_run_in_cluster(
    control_plane: KindPlane,
    worker_rights: str,
    cluster_queue: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = new_run_id()
    module = tmp_path / "experiment.py"
    module.write_text(textwrap.dedent(MODULE.format(image=SCRIPTED)))
    root = artifacts(tmp_path)
    in_cluster_worker(monkeypatch, control_plane, cluster_queue)
    monkeypatch.setenv("SOCIETY_KUBE_IMPERSONATE", WORKER)
    credentials = credentials_binding_name(run_id)
    seen: dict[str, Any] = {}

    async with Kube.connect(kubeconfig=worker_rights) as admin:
        activities = LifecycleActivities()

        @activity.defn(name=EXECUTE)
        async def execute(request: RunRequest) -> RunResult:
            seen["namespace"] = await admin.get("Namespace", run_id)
            seen["binding"] = await admin.get("RoleBinding", WORKER_BINDING, run_id)
            seen["controller"] = await admin.get("RoleBinding", "society-controller", run_id)
            seen["credentials"] = await admin.get("RoleBinding", credentials, CREDENTIALS)
            return await activities.execute(request)

        request = RunRequest(
            module_path=str(tmp_path / "not-on-the-worker.py"),  # the worker reads no path
            module_source=ModuleSource.read(module),
            run_id=run_id,
            profile="kubernetes",
            artifact_root=str(root),
        )
        result = await run_society(temporal_address, request, activities, execute)
        left = await left_in_cluster(admin, run_id)
        credentials_left = await admin.get("RoleBinding", credentials, CREDENTIALS)

    outcome = RunResult.model_validate(result)
    assert outcome.outcome == "ProgramFinished" and outcome.exit == "success", outcome.cause
    # prepare, as the worker: the namespace names its creator, and the worker bound itself there
    assert seen["namespace"]["metadata"]["annotations"][CREATED_BY] == WORKER
    assert seen["binding"]["roleRef"]["name"] == RUN_NAMESPACE_ROLE
    assert seen["binding"]["subjects"] == [THE_WORKER]
    assert seen["controller"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": CONTROLLER_ROLE,
    }
    assert seen["credentials"] is not None and credentials_left is None
    # cleanup, as the worker: the namespace and everything in it are gone
    assert left == []
    assert outcome.receipt.complete
