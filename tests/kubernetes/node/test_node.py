"""The harness's real node runs pods from the locally built images, by digest, and keeps their
traffic on the machine; KWOK nodes and the real node stay apart."""

from __future__ import annotations

import time
from typing import Any

from controlplane import ControlPlane, Images, wait_until
from cp_node import KWOK_TAINT, NODE_LABEL

PROBE = """
import json, os, socket, sys
def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__ + ": " + str(exc)
print(json.dumps({
    "uid": os.getuid(),
    "python": sys.version.split()[0],
    "society": __import__("controller").__file__,
    "outside": reach("192.0.2.1", 80),
}))
"""


def _pod(name: str, image: str, command: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                    },
                }
            ],
        },
    }


def _finished(core: Any, namespace: str, name: str) -> Any:
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def test_a_pod_runs_from_a_locally_built_image_pinned_by_digest(
    node_plane: ControlPlane, node_images: Images, node_namespace: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(node_plane.api_client())
    image = node_images.ref("scripted")
    assert "@sha256:" in image and image.startswith("localhost/society/python@")
    started = time.monotonic()
    core.create_namespaced_pod(node_namespace, _pod("probe", image, ["python3", "-c", PROBE]))
    pod = wait_until(
        "the probe pod to finish", lambda: _finished(core, node_namespace, "probe"), 120
    )
    log = core.read_namespaced_pod_log("probe", node_namespace)
    assert pod.status.phase == "Succeeded", (pod.status, log)
    assert node_plane.node is not None and pod.spec.node_name == node_plane.node.name
    status = pod.status.container_statuses[0]
    # The kubelet ran exactly the image the map names: same digest, nothing pulled.
    assert status.image_id.endswith(image.split("@", 1)[1]), status.image_id
    import json

    report = json.loads(log.strip().splitlines()[-1])
    assert report["uid"] == 65532  # the image's non-root user
    assert report["python"].startswith("3.11")
    assert report["society"].startswith("/opt/society/src/controller")
    # No route out of the node's namespace: the host's gateway is unreachable from a pod.
    assert report["outside"].startswith("OSError") or "unreachable" in report["outside"], report
    assert time.monotonic() - started < 120


def test_kwok_nodes_are_tainted_and_the_real_node_labelled(node_plane: ControlPlane) -> None:
    from kubernetes import client

    core = client.CoreV1Api(node_plane.api_client())
    real = core.list_node(label_selector=f"{NODE_LABEL}=real").items
    assert [n.metadata.name for n in real] == [node_plane.node.name if node_plane.node else ""]
    assert not real[0].spec.taints
    kwok = core.list_node(label_selector="type=kwok").items
    assert kwok and all(
        any(t.key == KWOK_TAINT["key"] and t.effect == "NoSchedule" for t in n.spec.taints or [])
        for n in kwok
    )
