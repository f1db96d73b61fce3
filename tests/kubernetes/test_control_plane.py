"""Smoke tests of KWOK inside the kind cluster (kind_kwok.py), the plane of the admission,
scheduling and RBAC tests: its fake nodes are Ready with the capacity asked for, a pod placed on
them turns Running and Ready without a container, a pod that selects them without tolerating
their taint is refused (nothing lands there by accident), and Kueue and Agent Sandbox act on
them as the kubernetes profile needs.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kind_kwok import KwokPlane
from plane import Plane, wait_until

pytestmark = pytest.mark.slow

KUEUE = ("kueue.x-k8s.io", "v1beta2")
SANDBOX = ("agents.x-k8s.io", "v1beta1")


def _core(plane: Plane) -> Any:
    from kubernetes import client

    return client.CoreV1Api(plane.api_client())


def _custom(plane: Plane) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(plane.api_client())


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = obj.get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def _is_true(obj: dict[str, Any], kind: str) -> bool:
    condition = _condition(obj, kind)
    return condition is not None and condition["status"] == "True"


def _when_true(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return obj if _is_true(obj, kind) else None


def _pod(name: str, placement: dict[str, Any]) -> dict[str, Any]:
    """A pod whose image no node could pull: only a fake node can run it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/society/agent:test",
                    "command": ["sleep", "infinity"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
            **placement,
        },
    }


def test_a_deleted_namespace_and_its_contents_disappear(control_plane: KwokPlane) -> None:
    from kubernetes.client.rest import ApiException

    core = _core(control_plane)
    name = f"ns-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "evidence"}, "data": {"k": "v"}})
    wait_until(
        f"the default ServiceAccount in {name}",
        lambda: core.read_namespaced_service_account("default", name),
        timeout=30,
    )
    core.create_namespaced_pod(name, _pod("doomed", control_plane.pod_placement))
    wait_until(
        "pod doomed Running",
        lambda: core.read_namespaced_pod("doomed", name).status.phase == "Running",
        timeout=60,
    )
    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_until(f"namespace {name} to disappear", gone, timeout=90)


def test_kwok_nodes_are_ready_with_the_requested_capacity(control_plane: KwokPlane) -> None:
    nodes = _core(control_plane).list_node(label_selector="type=kwok").items
    assert sorted(n.metadata.name for n in nodes) == sorted(control_plane.node_names)
    for node in nodes:
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert node.status.allocatable["cpu"] == control_plane.node_capacity.cpu
        assert node.status.allocatable["pods"] == control_plane.node_capacity.pods


def test_a_placed_pod_runs_on_a_kwok_node_and_one_that_only_selects_them_is_refused(
    control_plane: KwokPlane, namespace: str
) -> None:
    core = _core(control_plane)
    core.create_namespaced_pod(namespace, _pod("placed", control_plane.pod_placement))
    selector_only = {"nodeSelector": control_plane.pod_placement["nodeSelector"]}
    core.create_namespaced_pod(namespace, _pod("untolerated", selector_only))

    def running_and_ready() -> Any:
        pod = core.read_namespaced_pod("placed", namespace)
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return pod if pod.status.phase == "Running" and ready else None

    pod = wait_until("pod placed Running and Ready", running_and_ready, timeout=60)
    assert pod.spec.node_name in control_plane.node_names
    assert pod.status.pod_ip, "KWOK gives the pod an address"

    def unschedulable() -> Any:
        pod = core.read_namespaced_pod("untolerated", namespace)
        return [
            c
            for c in pod.status.conditions or []
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        ]

    (condition,) = wait_until("the untolerated pod refused by the scheduler", unschedulable, 60)
    assert "taint" in condition.message, condition.message
    assert core.read_namespaced_pod("untolerated", namespace).spec.node_name is None


def test_kueue_admits_a_v1beta2_workload_within_quota_and_keeps_one_beyond_it_pending(
    control_plane: KwokPlane, namespace: str
) -> None:
    custom = _custom(control_plane)
    group, version = KUEUE
    suffix = uuid.uuid4().hex[:8]
    flavor, cluster_queue = f"flavor-{suffix}", f"cq-{suffix}"
    custom.create_cluster_custom_object(
        group,
        version,
        "resourceflavors",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
        },
    )
    custom.create_cluster_custom_object(
        group,
        version,
        "clusterqueues",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "4"},
                                    {"name": "memory", "nominalQuota": "8Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    custom.create_namespaced_custom_object(
        group,
        version,
        namespace,
        "localqueues",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "LocalQueue",
            "metadata": {"name": "roster"},
            "spec": {"clusterQueue": cluster_queue},
        },
    )
    wait_until(
        "ClusterQueue Active",
        lambda: _is_true(
            custom.get_cluster_custom_object(group, version, "clusterqueues", cluster_queue),
            "Active",
        ),
        timeout=30,
    )

    def workload(name: str, cpu: str, count: int) -> dict[str, Any]:
        return {
            "apiVersion": f"{group}/{version}",
            "kind": "Workload",
            "metadata": {"name": name},
            "spec": {
                "queueName": "roster",
                "podSets": [
                    {
                        "name": "agents",
                        "count": count,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "agent",
                                        "image": "registry.invalid/society/agent:test",
                                        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        }

    def read(name: str) -> dict[str, Any]:
        result: dict[str, Any] = custom.get_namespaced_custom_object(
            group, version, namespace, "workloads", name
        )
        return result

    try:
        custom.create_namespaced_custom_object(
            group, version, namespace, "workloads", workload("fits", "1", 3)
        )
        admitted = wait_until(
            "workload fits Admitted", lambda: _when_true(read("fits"), "Admitted"), timeout=60
        )
        assert admitted["status"]["admission"]["clusterQueue"] == cluster_queue

        custom.create_namespaced_custom_object(
            group, version, namespace, "workloads", workload("too-big", "2", 3)
        )
        wait_until(
            "workload too-big to be evaluated",
            lambda: _condition(read("too-big"), "QuotaReserved"),
            timeout=60,
        )
        time.sleep(2)  # give a wrong admission the chance to happen
        pending = read("too-big")
        print(f"\nPending workload conditions: {pending['status']['conditions']}")
        assert not _is_true(pending, "QuotaReserved"), pending["status"]
        assert not _is_true(pending, "Admitted"), pending["status"]
        assert "admission" not in pending["status"]
    finally:
        for plural in ("workloads", "localqueues"):
            for item in custom.list_namespaced_custom_object(group, version, namespace, plural)[
                "items"
            ]:
                custom.delete_namespaced_custom_object(
                    group, version, namespace, plural, item["metadata"]["name"]
                )
        custom.delete_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
        custom.delete_cluster_custom_object(group, version, "resourceflavors", flavor)


def test_kueue_defaults_through_its_webhook_and_converts_to_v1beta1(
    control_plane: KwokPlane, namespace: str
) -> None:
    custom = _custom(control_plane)
    group, version = KUEUE
    name = f"defaulted-{uuid.uuid4().hex[:8]}"
    created = custom.create_cluster_custom_object(
        group,
        version,
        "clusterqueues",
        {"apiVersion": f"{group}/{version}", "kind": "ClusterQueue", "metadata": {"name": name}},
    )
    try:
        # Only Kueue's mutating webhook adds this, before the object is stored.
        assert "kueue.x-k8s.io/resource-in-use" in created["metadata"]["finalizers"]
        # Stored as v1beta2; reading v1beta1 goes through Kueue's conversion webhook.
        old = custom.get_cluster_custom_object(group, "v1beta1", "clusterqueues", name)
        assert old["apiVersion"] == f"{group}/v1beta1"
        assert old["metadata"]["uid"] == created["metadata"]["uid"]
    finally:
        custom.delete_cluster_custom_object(group, version, "clusterqueues", name)


def test_an_agent_sandbox_gets_a_running_pod_and_reports_ready(
    control_plane: KwokPlane, namespace: str
) -> None:
    custom, core = _custom(control_plane), _core(control_plane)
    group, version = SANDBOX
    custom.create_namespaced_custom_object(
        group,
        version,
        namespace,
        "sandboxes",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "Sandbox",
            "metadata": {"name": "agent-a"},
            "spec": {
                "service": True,  # opt-in since v0.5: a headless Service per sandbox
                "podTemplate": {
                    "metadata": {"labels": {"society/agent": "a"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "agent",
                                "image": "registry.invalid/society/agent:test",
                                "command": ["sleep", "infinity"],
                                "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
                            }
                        ],
                        **control_plane.pod_placement,
                    },
                },
            },
        },
    )
    sandbox = wait_until(
        "Sandbox agent-a Ready",
        lambda: _when_true(
            custom.get_namespaced_custom_object(group, version, namespace, "sandboxes", "agent-a"),
            "Ready",
        ),
        timeout=90,
    )
    status = sandbox["status"]
    print(f"\nSandbox status observed: {status}")
    pods = core.list_namespaced_pod(namespace, label_selector=status["selector"]).items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.status.phase == "Running"
    assert pod.spec.node_name in control_plane.node_names
    assert pod.metadata.labels["society/agent"] == "a"
    assert status["nodeName"] == pod.spec.node_name
    assert status["podIPs"] == [pod.status.pod_ip]
    assert status["service"] == "agent-a"
    assert status["serviceFQDN"] == f"agent-a.{namespace}.svc.cluster.local"
    service = core.read_namespaced_service("agent-a", namespace)
    assert service.spec.cluster_ip == "None"


def test_agent_sandbox_serves_its_core_and_extension_kinds_at_v1beta1_only(
    control_plane: KwokPlane,
) -> None:
    from kubernetes import client

    api = client.ApiextensionsV1Api(control_plane.api_client())
    served = {
        crd.spec.names.kind: [v.name for v in crd.spec.versions if v.served]
        for crd in api.list_custom_resource_definition().items
        if crd.spec.group.endswith(SANDBOX[0])
    }
    # The GA line dropped v1alpha1 and its conversion webhook; the extensions stay installed.
    assert served == {
        kind: ["v1beta1"]
        for kind in ("Sandbox", "SandboxClaim", "SandboxTemplate", "SandboxWarmPool")
    }


def test_every_kueue_webhook_skips_kube_system_and_kueue_system_as_the_release_installs_it(
    control_plane: KwokPlane,
) -> None:
    from kubernetes import client

    api = client.AdmissionregistrationV1Api(control_plane.api_client())
    webhooks = [
        webhook
        for listing in (
            api.list_mutating_webhook_configuration(),
            api.list_validating_webhook_configuration(),
        )
        for config in listing.items
        if config.metadata.name.startswith("kueue-")
        for webhook in config.webhooks
    ]
    assert len(webhooks) > 20
    for webhook in webhooks:
        if {group for rule in webhook.rules for group in rule.api_groups} == {KUEUE[0]}:
            continue  # Kueue's own kinds: the release selects no namespaces for them
        selector = webhook.namespace_selector
        expressions = selector.match_expressions if selector else None
        assert expressions, f"{webhook.name} has no namespaceSelector"
        assert [(e.key, e.operator, sorted(e.values)) for e in expressions] == [
            ("kubernetes.io/metadata.name", "NotIn", ["kube-system", "kueue-system"])
        ], webhook.name
