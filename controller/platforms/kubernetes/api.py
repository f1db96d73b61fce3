"""The Kubernetes API as a run speaks it: objects are dicts, the kinds it uses (``KINDS``) and
their paths, the API server's refusal (``KubeError``), and objects' status conditions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from controller.run.platform import PlatformError

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Kind:
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        return base + (f"/{quote(name)}" if name else "")


KUEUE = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
SANDBOX_GROUP = "agents.x-k8s.io"
SANDBOX_VERSION = "v1beta1"  # what Agent Sandbox v1.0.3 serves and stores (its only version)
SANDBOX_EXTENSIONS = "extensions.agents.x-k8s.io"
"""Agent Sandbox's warm pools: SandboxTemplate, SandboxWarmPool, SandboxClaim (``v1beta1``)."""

KINDS: dict[str, Kind] = {
    "Namespace": Kind("", "v1", "namespaces", namespaced=False),
    "ConfigMap": Kind("", "v1", "configmaps"),
    "Secret": Kind("", "v1", "secrets"),
    "Service": Kind("", "v1", "services"),
    "ServiceAccount": Kind("", "v1", "serviceaccounts"),
    "Pod": Kind("", "v1", "pods"),
    "NetworkPolicy": Kind("networking.k8s.io", "v1", "networkpolicies"),
    "EndpointSlice": Kind("discovery.k8s.io", "v1", "endpointslices"),
    "Role": Kind("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Kind("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "ClusterRole": Kind("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Kind(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False
    ),
    "Job": Kind("batch", "v1", "jobs"),
    "PersistentVolumeClaim": Kind("", "v1", "persistentvolumeclaims"),
    "PersistentVolume": Kind("", "v1", "persistentvolumes", namespaced=False),
    "StorageClass": Kind("storage.k8s.io", "v1", "storageclasses", namespaced=False),
    "Deployment": Kind("apps", "v1", "deployments"),
    "Node": Kind("", "v1", "nodes", namespaced=False),
    "LocalQueue": Kind(KUEUE, KUEUE_VERSION, "localqueues"),
    "Workload": Kind(KUEUE, KUEUE_VERSION, "workloads"),
    "ClusterQueue": Kind(KUEUE, KUEUE_VERSION, "clusterqueues", namespaced=False),
    "ResourceFlavor": Kind(KUEUE, KUEUE_VERSION, "resourceflavors", namespaced=False),
    "Sandbox": Kind(SANDBOX_GROUP, SANDBOX_VERSION, "sandboxes"),
    "SandboxTemplate": Kind(SANDBOX_EXTENSIONS, SANDBOX_VERSION, "sandboxtemplates"),
    "SandboxWarmPool": Kind(SANDBOX_EXTENSIONS, SANDBOX_VERSION, "sandboxwarmpools"),
    "SandboxClaim": Kind(SANDBOX_EXTENSIONS, SANDBOX_VERSION, "sandboxclaims"),
    "ValidatingAdmissionPolicy": Kind(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", namespaced=False
    ),
    "ValidatingAdmissionPolicyBinding": Kind(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", namespaced=False
    ),
    "SelfSubjectReview": Kind("authentication.k8s.io", "v1", "selfsubjectreviews", False),
    "SelfSubjectAccessReview": Kind(
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", namespaced=False
    ),
}


class KubeError(PlatformError):
    """The API server refused or failed a request; ``status`` is its HTTP status."""

    reason = "kubernetes-api"

    def __init__(
        self,
        detail: str,
        *,
        reason: str | None = None,
        next_step: str | None = None,
        status: int,
    ) -> None:
        super().__init__(detail, reason=reason, next_step=next_step)
        self.status = status


def condition(obj: Obj | None, kind: str) -> Obj | None:
    """The status condition of type ``kind``, if present."""
    if obj is None:
        return None
    for item in obj.get("status", {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"
