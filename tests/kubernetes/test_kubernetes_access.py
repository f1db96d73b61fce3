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
from kind_kwok import KwokPlane

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
    control_plane: KwokPlane,
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


@pytest.mark.parametrize(
    ("address", "cidr", "family"),
    [("10.89.0.1", "10.89.0.1/32", "IPv4"), ("fc00:b540::1", "fc00:b540::1/128", "IPv6")],
)
async def test_an_out_of_cluster_router_address_of_either_family_is_accepted_by_the_api_server(
    control_plane: KwokPlane, address: str, cidr: str, family: str
) -> None:
    """The debugging mode's Service endpoint and policies name the controller's address: the API
    server takes an IPv4 or IPv6 address as a host route of its own family (a /32 on an IPv6
    address is refused: "must not have bits set beyond the prefix length")."""
    run_id = new_run_id()
    async with Kube.connect(kubeconfig=str(control_plane.kubeconfig)) as kube:
        owner = await prepare_run_namespace(kube, run_id)
        try:
            manifests = [
                routing.router_service(run_id, 7443, external=address),
                routing.router_endpoints(run_id, address, 7443, []),
                *routing.network_policies(
                    run_id, controller_ports=[7443], bridge_ports=[7400], external=address
                ),
            ]
            for manifest in manifests:
                await kube.apply(objects.owned(manifest, owner))
            slices, _ = await kube.list("EndpointSlice", run_id)
            assert [s["addressType"] for s in slices] == [family]
            policy = await kube.get("NetworkPolicy", "agents", run_id)
            assert policy is not None
            assert policy["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": cidr}}]
        finally:
            await delete_run_namespace(kube, run_id)


def test_a_router_address_that_is_no_ip_address_is_refused_naming_the_setting() -> None:
    from controller.platforms.kubernetes import KubernetesPlatform, KubernetesSettings
    from controller.run.platform import PlatformError

    settings = KubernetesSettings(controller_job=False, router_address="laptop.local")
    with pytest.raises(PlatformError) as refused:
        KubernetesPlatform(settings)
    assert refused.value.reason == "router-address-invalid"
    assert "SOCIETY_ROUTER_ADDRESS" in str(refused.value) and "laptop.local" in str(refused.value)
