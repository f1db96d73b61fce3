"""Ownership and the in-cluster manifests, against the real control plane with KWOK nodes.

Here the policies are objects the API server accepts; tests/kubernetes/node checks them as
traffic from inside an agent's pod, and runs a whole run as the controller's identity.
"""

from __future__ import annotations

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

from controller.incluster.access import controller_job, runspec_configmap
from controller.platforms.kubernetes import (
    Kube,
    KubeError,
    delete_run_namespace,
    objects,
    prepare_run_namespace,
    routing,
)
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def forbidden(call: Any) -> bool:
    try:
        await call
    except KubeError as exc:
        return exc.status == 403
    return False


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
