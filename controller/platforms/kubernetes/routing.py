"""How a run's pods reach each other: the router's Service, and the network policies.

Agents dial ``society-router.<run>.svc``. They need no cluster DNS for it: each agent pod's
``hostAliases`` maps that name to the Service's ClusterIP (``host_aliases``), so the same pods
work on a cluster with or without DNS, and DNS egress is not allowed at all. The controller
reaches agents' bridges at their pod IPs.

The Service selects the controller Job's pod. With the controller out of cluster (a debugging
mode, ``KubernetesSettings.router_address``) the Service has no selector and one endpoint,
that address, and the policies name it as an ``ipBlock`` where they would name the pod.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from controller.platforms.kubernetes.kube import Obj
from controller.platforms.kubernetes.objects import (
    ROLE_LABEL,
    ROUTER_SERVICE,
    RUN_LABEL,
    manifest,
    run_metadata,
)
from controller.platforms.kubernetes.warm import WARM_NAMESPACE

NAMESPACE_NAME = "kubernetes.io/metadata.name"
"""The label the API server puts on every namespace: its name."""


def router_host(run_id: str) -> str:
    return f"{ROUTER_SERVICE}.{run_id}.svc"


def _ports(port: int, service_ports: Sequence[int]) -> list[dict[str, Any]]:
    ports = [{"name": "router", "port": port, "targetPort": port, "protocol": "TCP"}]
    ports += [
        {"name": f"service-{p}", "port": p, "targetPort": p, "protocol": "TCP"}
        for p in sorted(set(service_ports) - {port})
    ]
    return ports


def router_service(
    run_id: str, port: int, service_ports: Sequence[int] = (), *, external: str | None = None
) -> Obj:
    """The router as agents reach it: the controller's pod behind a per-run Service; the run
    services' ports (the model gateway) are advertised on the same Service. ``external``: the
    controller runs outside the cluster at that address (no selector; see ``router_endpoints``).
    """
    spec: dict[str, Any] = {"ports": _ports(port, service_ports)}
    if external is None:
        spec["selector"] = {RUN_LABEL: run_id, ROLE_LABEL: "controller"}
    return manifest(
        "Service", run_metadata(run_id, ROUTER_SERVICE, **{ROLE_LABEL: "router"}), spec=spec
    )


def external_address(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The out-of-cluster controller's address as an IP address (an EndpointSlice and an
    ``ipBlock`` take no host name); ``ValueError`` says what to give instead."""
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(
            f"the router address {address!r} is not an IP address: give SOCIETY_ROUTER_ADDRESS "
            "as an IPv4 or IPv6 address of this machine that the cluster's pods reach"
        ) from None


def router_endpoints(run_id: str, address: str, port: int, service_ports: Sequence[int]) -> Obj:
    """The selector-less Service's one endpoint: the out-of-cluster controller's address."""
    metadata = run_metadata(run_id, ROUTER_SERVICE, **{ROLE_LABEL: "router"})
    metadata["labels"]["kubernetes.io/service-name"] = ROUTER_SERVICE
    return manifest(
        "EndpointSlice",
        metadata,
        addressType=f"IPv{external_address(address).version}",
        endpoints=[{"addresses": [address], "conditions": {"ready": True}}],
        ports=[
            {"name": p["name"], "port": p["port"], "protocol": "TCP"}
            for p in _ports(port, service_ports)
        ],
    )


def host_aliases(run_id: str, cluster_ip: str) -> list[dict[str, Any]]:
    """The pod's ``/etc/hosts`` entry for the router's Service: no DNS lookup is needed."""
    host = router_host(run_id)
    return [{"ip": cluster_ip, "hostnames": [host, f"{host}.cluster.local"]}]


def controller_peer(run_id: str, external: str | None = None) -> dict[str, Any]:
    """The run's controller as a policy peer seen from another namespace: its pod in the run's
    namespace, or ``external``, its address when it runs outside the cluster."""
    if external:
        host = external_address(external)
        return {"ipBlock": {"cidr": f"{host}/{host.max_prefixlen}"}}
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: run_id}},
        "podSelector": {"matchLabels": {ROLE_LABEL: "controller"}},
    }


def network_policies(
    run_id: str,
    *,
    controller_ports: Sequence[int],
    bridge_ports: Sequence[int],
    external: str | None = None,
) -> list[Obj]:
    """Default deny; agents reach only the controller (router, model gateway); only the
    controller reaches agents' bridges. Agents never reach each other around the router, nor
    DNS, the API server or anything else. ``external``: the controller's address when it runs
    outside the cluster."""
    agents = {"matchLabels": {ROLE_LABEL: "agent"}}
    controller = {"matchLabels": {ROLE_LABEL: "controller"}}
    peer: dict[str, Any] = {"podSelector": controller}
    if external:
        host = external_address(external)
        peer = {"ipBlock": {"cidr": f"{host}/{host.max_prefixlen}"}}
    claimed = {  # the run's agents in warm pods (``warm``): Agent Sandbox put its labels there
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: WARM_NAMESPACE}},
        "podSelector": {"matchLabels": {RUN_LABEL: run_id, ROLE_LABEL: "agent"}},
    }

    def policy(name: str, spec: dict[str, Any]) -> Obj:
        return manifest("NetworkPolicy", run_metadata(run_id, name), spec=spec)

    def ports(numbers: Sequence[int]) -> list[dict[str, Any]]:
        return [{"protocol": "TCP", "port": p} for p in sorted(set(numbers))]

    return [
        policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        policy(
            "agents",
            {
                "podSelector": agents,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [peer], "ports": ports(bridge_ports)}],
                "egress": [{"to": [peer], "ports": ports(controller_ports)}],
            },
        ),
        policy(
            "controller",
            {
                "podSelector": controller,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {"from": [{"podSelector": agents}, claimed], "ports": ports(controller_ports)}
                ],
                "egress": [{}],  # the API server, agents' bridges
            },
        ),
    ]
