"""KWOK inside the kind cluster: the KWOK controller as a Deployment on the control-plane node and
fake nodes whose pods turn Running and Ready at once and run nothing, for admission, scheduling
and RBAC at the scale of a large roster (1,000 agents) where real containers would not fit.

The controller is the control-plane build's static ``kwok`` binary (kind/versions.env's
``KWOK_VERSION``) in an image FROM scratch, built here with podman and imported into the
control-plane node; no registry is involved. Its stages are kwokctl's defaults (nodes turn Ready
and renew leases; pods on them turn Running and Ready, Job pods complete, deleted pods go away),
taken from the KWOK module the build downloaded.

The fake nodes carry the label ``type=kwok`` and the taint ``kwok.x-k8s.io/node=fake:NoSchedule``,
so nothing lands there by accident: a run reaches them through the kubernetes platform's own
placement settings (``agent_node_selector`` and ``agent_tolerations``, the ones that put agents
on a GKE node pool), which ``KwokPlane.placement`` gives.

Test-only: nothing here is imported by ``controller``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cp_build import build_control_plane
from kind_cluster import KindCluster

NAMESPACE = "kwok-system"
ANNOTATION = "kwok.x-k8s.io/node"
LABEL = ("type", "kwok")
TAINT = {"key": ANNOTATION, "value": "fake", "effect": "NoSchedule"}
PORT = 10247
POD_CIDR = "10.250.0.1/16"
"""Where KWOK's pods take their addresses: apart from the cluster's pod (10.244.0.0/16) and
Service (10.96.0.0/12) ranges."""


@dataclass(frozen=True)
class NodeCapacity:
    """Allocatable resources of each fake KWOK node."""

    cpu: str = "16"
    memory: str = "64Gi"
    pods: str = "110"
    ephemeral_storage: str = "100Gi"
    """Real nodes report it; without it no pod with an ephemeral-storage limit schedules."""


@dataclass(frozen=True)
class KwokPlane:
    """The kind cluster as the KWOK tests see it: its fake nodes, where their pods go."""

    cluster: KindCluster
    node_names: list[str]
    node_capacity: NodeCapacity

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    @property
    def manifest_dir(self) -> Path:
        """The control-plane build's manifests: the Kueue and Agent Sandbox CRDs at their pins."""
        return build_control_plane() / "manifests"

    def api_client(self) -> Any:
        """A new admin ``kubernetes.client.ApiClient``."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    @property
    def placement(self) -> dict[str, Any]:
        """The kubernetes platform's settings that put a run's agents on these nodes."""
        return {
            "agent_node_selector": dict([LABEL]),
            "agent_tolerations": [{**TAINT, "operator": "Equal"}],
        }

    @property
    def pod_placement(self) -> dict[str, Any]:
        """The pod-spec fields that put a plain pod on these nodes."""
        return {
            "nodeSelector": dict([LABEL]),
            "tolerations": [{**TAINT, "operator": "Equal"}],
        }


def stages_config() -> str:
    """kwokctl's default stages as one multi-document YAML (``--config``)."""
    stages = build_control_plane() / "manifests" / "kwok" / "stages"
    files = [
        stages / "node" / "fast" / "node-initialize.yaml",
        stages / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
        *(stages / "pod" / "fast" / f"{stage}.yaml"
          for stage in ("pod-ready", "pod-complete", "pod-delete")),
    ]  # fmt: skip
    return "\n---\n".join(path.read_text().strip().removeprefix("---").strip() for path in files)


def kwok_image(cluster: KindCluster) -> str:
    """``localhost/society/kwok:<version>-<hash of the binary>`` in podman's storage (built once):
    the static binary alone, FROM scratch."""
    binary = build_control_plane() / "bin" / "kwok"
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    image = f"localhost/society/kwok:{digest}"
    if subprocess.run(["podman", "image", "exists", image]).returncode == 0:
        return image
    with tempfile.TemporaryDirectory(prefix="society-kwok-image-") as context:
        (Path(context) / "kwok").write_bytes(binary.read_bytes())
        (Path(context) / "kwok").chmod(0o755)
        (Path(context) / "Containerfile").write_text(
            'FROM scratch\nCOPY kwok /kwok\nUSER 65532:65532\nENTRYPOINT ["/kwok"]\n'
        )
        cluster.podman("build", "--runtime", "runc", "-t", image, context)
    return image


def _objects(image: str, config: str) -> list[dict[str, Any]]:
    meta = {"name": "kwok-controller", "namespace": NAMESPACE}
    labels = {"app": "kwok-controller"}
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes/status", "pods/status"],
         "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"],
         "verbs": ["get", "list", "watch", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["create", "get", "list", "watch", "patch", "update"]},
    ]  # fmt: skip
    args = [
        "--config=/etc/kwok/stages.yaml",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={ANNOTATION}=fake",
        f"--cidr={POD_CIDR}",
        "--node-ip=$(POD_IP)",
        f"--node-port={PORT}",
        f"--server-address=0.0.0.0:{PORT}",
        "--node-lease-duration-seconds=40",
    ]
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    container = {
        "name": "kwok-controller",
        "image": image,
        "imagePullPolicy": "Never",
        "args": args,
        "env": env,
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": PORT}, "periodSeconds": 2},
        "volumeMounts": [{"name": "stages", "mountPath": "/etc/kwok", "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }  # fmt: skip
    spec = {
        "serviceAccountName": "kwok-controller",
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": [{"name": "stages", "configMap": {"name": "kwok-stages"}}],
    }  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "kwok-controller"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "kwok-controller"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "kwok-controller"},
         "subjects": [{"kind": "ServiceAccount", **meta}]},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "kwok-stages", "namespace": NAMESPACE},
         "data": {"stages.yaml": config}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": spec}}},
    ]  # fmt: skip


def _node(name: str, capacity: NodeCapacity) -> dict[str, Any]:
    resources = {
        "cpu": capacity.cpu,
        "memory": capacity.memory,
        "pods": capacity.pods,
        "ephemeral-storage": capacity.ephemeral_storage,
    }
    key, value = LABEL
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {key: value, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent"},
        },
        "spec": {"taints": [TAINT]},
        "status": {"allocatable": resources, "capacity": resources},
    }  # fmt: skip


def start_kwok(
    cluster: KindCluster, nodes: int, capacity: NodeCapacity, *, timeout: float = 180.0
) -> KwokPlane:
    """Deploy the KWOK controller, create ``nodes`` fake nodes ``kwok-node-<i>`` with
    ``capacity``, and wait until the controller is ready and every node Ready."""
    image = kwok_image(cluster)
    control = cluster.kubectl(
        "get", "nodes", "-l", "node-role.kubernetes.io/control-plane",
        "-o", "jsonpath={.items[*].metadata.name}",
    ).stdout.split()  # fmt: skip
    archive = cluster.workdir / "kwok-image.tar"
    cluster.podman("save", "--format", "oci-archive", "-o", str(archive), image)
    cluster.import_archive(archive, image.split(":")[0], control)
    archive.unlink()
    cluster.apply(*_objects(image, stages_config()))
    cluster.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/kwok-controller",
                    f"--timeout={int(timeout)}s", timeout=timeout + 30)  # fmt: skip
    names = [f"kwok-node-{index}" for index in range(nodes)]
    cluster.apply(*(_node(name, capacity) for name in names))
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(cluster.kubectl("get", "nodes", "-l", "=".join(LABEL),
                                            "-o", "json").stdout)["items"]  # fmt: skip
        ready = [n["metadata"]["name"] for n in listed
                 if any(c["type"] == "Ready" and c["status"] == "True"
                        for c in n.get("status", {}).get("conditions", []))]  # fmt: skip
        if sorted(ready) == sorted(names):
            return KwokPlane(cluster, names, capacity)
        if time.monotonic() > deadline:
            logs = cluster.kubectl("-n", NAMESPACE, "logs", "deployment/kwok-controller",
                                   "--tail=40", check=False).stdout  # fmt: skip
            raise AssertionError(f"KWOK nodes Ready after {timeout:.0f}s: {ready} of {names}; "
                                 f"the controller's log:\n{logs}")  # fmt: skip
        time.sleep(1)


def node_cpu_seconds(cluster: KindCluster) -> dict[str, float]:
    """CPU time (user + system) every process of each node's container used so far (its
    cgroup's ``cpuacct.usage``): the API server, etcd, the controllers, KWOK, Kueue, Agent Sandbox
    and the kubelet of that node together."""
    used = {}
    for node in cluster.nodes():
        path = cluster.podman("inspect", "-f", "{{.State.CgroupPath}}", node).strip()
        usage = Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/") / "cpuacct.usage"
        used[node] = int(usage.read_text()) / 1e9
    return used
