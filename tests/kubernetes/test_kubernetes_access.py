"""The controller's RBAC, ownership and the in-cluster manifests, against the real control plane.

KWOK does not enforce NetworkPolicy (no CNI runs pods): the policies are checked as objects the
API server accepts, not as traffic that is dropped.
"""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

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
    on_cluster,
)
from controlplane import ControlPlane
from test_kubernetes_platform import hear_everyone, spec_of

from controller import Run
from controller.platform.kubernetes import (
    Kube,
    KubeError,
    delete_run_namespace,
    objects,
    prepare_run_namespace,
    routing,
)
from controller.platform.kubernetes.access import controller_job, runspec_configmap
from controller.platform.kubernetes.rbac import controller_subject
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
    control_plane: ControlPlane, cluster_queue: str, tmp_path: Path
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
            ) as (platform, _kube, _record, _pods):
                outcome = await Run.execute(
                    spec_of(hear_everyone),
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
                    "spec": {"containers": [{"name": "x", "image": PINNED}]},
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


async def test_deleting_the_owner_collects_every_run_object_including_the_controller_job(
    control_plane: ControlPlane,
) -> None:
    run_id = new_run_id()
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        owner = await prepare_run_namespace(kube, run_id)
        try:
            manifests = [
                runspec_configmap(run_id, "experiment.py", b"run_spec = ...\n"),
                controller_job(
                    run_id,
                    image=PINNED,
                    module_name="experiment.py",
                    seed=7,
                    profile="kind",
                    cluster_queue="society-agents",
                    active_deadline_s=3600,
                ),
                routing.router_service(run_id, 7443),
                *routing.network_policies(run_id, controller_ports=[7443], bridge_ports=[7400]),
            ]
            for manifest in manifests:
                live = await kube.apply(objects.owned(manifest, owner))
                assert live["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
            policies, _ = await kube.list("NetworkPolicy", run_id)
            by_name = {p["metadata"]["name"]: p["spec"] for p in policies}
            assert by_name["default-deny"] == {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
            }
            agents_egress = by_name["agents"]["egress"]
            assert agents_egress[0]["to"] == [
                {"podSelector": {"matchLabels": {objects.ROLE_LABEL: "controller"}}}
            ]
            assert [p["port"] for p in agents_egress[0]["ports"]] == [7443]
            # no rule lets an agent reach another agent, nor DNS (the router's name is in the
            # pod's /etc/hosts), nor anything else
            assert len(agents_egress) == 1
            await kube.delete("ConfigMap", objects.OWNER, run_id)

            async def collected() -> None:
                while True:
                    kinds = ("Job", "Service", "NetworkPolicy", "Role", "ServiceAccount")
                    remaining = [
                        kind
                        for kind in kinds
                        for item in (await kube.list(kind, run_id))[0]
                        if item["metadata"].get("labels", {}).get(objects.RUN_LABEL) == run_id
                    ]
                    if not remaining:
                        return
                    await anyio.sleep(0.5)

            with anyio.fail_after(60):
                await collected()
        finally:
            await delete_run_namespace(kube, run_id)
