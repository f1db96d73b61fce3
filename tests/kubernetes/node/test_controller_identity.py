"""The controller's identity runs a whole run on kind, and can do nothing more: its
Role and RoleBinding (``prepare_run_namespace``), impersonated by this process as the controller.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    SCRIPTED,
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
    on_cluster,
)
from k8s_run_support import hear_everyone, spec_of
from kind_plane import KindPlane

from controller import Run
from controller.platforms.kubernetes import (
    Kube,
    KubeError,
    delete_run_namespace,
    objects,
    prepare_run_namespace,
)
from controller.platforms.kubernetes.rbac import controller_subject
from controller.run import ProgramFinished, Success
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def forbidden(call: Any) -> bool:
    try:
        await call
    except KubeError as exc:
        return exc.status == 403
    return False


async def test_the_controller_identity_runs_a_whole_run_and_can_do_nothing_more(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path
) -> None:
    run_id = new_run_id()
    other = new_run_id()
    kubeconfig = str(control_plane.kubeconfig)
    subject = controller_subject(run_id)
    async with Kube.connect(kubeconfig=kubeconfig) as admin:
        await prepare_run_namespace(admin, run_id)  # what the run worker does
        await prepare_run_namespace(admin, other)
        try:
            async with on_cluster(
                control_plane,
                run_id,
                cluster_queue=cluster_queue,
                impersonate=subject,
                prepare_namespace=False,
                delete_namespace=False,
            ) as (platform, _kube, _record):
                outcome = await Run.execute(
                    spec_of(hear_everyone, SCRIPTED),
                    platform=platform,
                    run_id=run_id,
                    artifact_root=artifacts(tmp_path),
                )
            assert isinstance(outcome, ProgramFinished), outcome
            assert isinstance(outcome.exit, Success), outcome.exit

            async with Kube.connect(kubeconfig=kubeconfig, impersonate=subject) as controller:
                assert await controller.get("ConfigMap", objects.OWNER, run_id) is not None
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "rogue", "namespace": run_id},
                    "spec": {"containers": [{"name": "x", "image": SCRIPTED}]},
                }
                denied = {
                    "read a Secret": controller.get("Secret", objects.ROUTER_CA_SECRET, run_id),
                    "list Secrets": controller.list("Secret", run_id),
                    "read another ConfigMap": controller.get(
                        "ConfigMap", "kube-root-ca.crt", run_id
                    ),
                    "create a Pod": controller.apply(pod),
                    "delete its namespace": controller.delete("Namespace", run_id),
                    "create a namespace": controller.apply(objects.namespace(new_run_id())),
                    "list another run's Sandboxes": controller.list("Sandbox", other),
                    "read another run's owner": controller.get("ConfigMap", objects.OWNER, other),
                    "list ClusterQueues": controller.list("ClusterQueue"),
                    "widen its Role": controller.apply(
                        {
                            "apiVersion": "rbac.authorization.k8s.io/v1",
                            "kind": "Role",
                            "metadata": {"name": "society-controller", "namespace": run_id},
                            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
                        }
                    ),
                }
                allowed = [what for what, call in denied.items() if not await forbidden(call)]
                assert allowed == []
        finally:
            await delete_run_namespace(admin, run_id)
            await delete_run_namespace(admin, other)
        assert await left_in_cluster(admin, run_id) == []
