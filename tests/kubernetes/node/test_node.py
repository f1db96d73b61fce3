"""The kind cluster's agents' node runs pods from the locally built images, by digest, with
nothing pulled."""

from __future__ import annotations

import time
from typing import Any

from cp_images import Images
from kind_plane import KindPlane
from plane import wait_until

PROBE = """
import importlib.util, json, os, sys
print(json.dumps({
    "uid": os.getuid(),
    "python": sys.version.split()[0],
    "programs": __import__("agent_images").__file__,
    "wall": __import__("society_sandbox").__file__,
    "controller": importlib.util.find_spec("controller") is not None,
    "ledger": importlib.util.find_spec("ledger") is not None,
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
    node_plane: KindPlane, node_images: Images, node_namespace: str
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
    assert report["programs"].startswith("/opt/society/src/agent_images")
    assert report["wall"].startswith("/opt/society/src/society_sandbox")
    # an agent's image holds the wall and the programs, nothing of the controller or the ledger
    assert (report["controller"], report["ledger"]) == (False, False)
    assert time.monotonic() - started < 120
