"""The run's NetworkPolicies (``routing.network_policies``) enforced on kind (kube-router),
tested from inside an agent's pod: it reaches the router (through the Service, by the name its
``/etc/hosts`` gives) and the model gateway's port; it cannot reach another agent's bridge,
another run's router, the Kubernetes API server or 169.254.169.254. The controller reaches the
bridges. A pod in a namespace without policies reaches the API server and the metadata address,
so the refusals are the policies' doing."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import anyio
import pytest
from cp_images import Images
from kind_plane import KindPlane
from plane import wait_until

from controller.platforms.kubernetes import Kube, objects, prepare_run_namespace, routing
from controller.run.runid import new_run_id

pytestmark = [pytest.mark.slow]

ROUTER, GATEWAY, BRIDGE = 7443, 8080, 7400
SERVE = """
import socket, sys, threading
def serve(port):
    server = socket.create_server(("0.0.0.0", port))
    while True:
        server.accept()[0].close()
for port in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(port),), daemon=True).start()
threading.Event().wait()
"""
PROBE = """
import json, socket, sys
def reach(target):
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    except OSError:
        return False
print(json.dumps({t: reach(t) for t in sys.argv[1:]}))
"""


def _pod(name: str, run_id: str, role: str, image: str, command: list[str]) -> dict[str, Any]:
    labels = objects.run_labels(run_id, **{objects.ROLE_LABEL: role, objects.AGENT_LABEL: name})
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": objects.NON_ROOT_ID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": command,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def _exec(
    plane: KindPlane, namespace: str, pod: str, targets: list[str], container: str | None = None
) -> dict[str, bool]:
    from kubernetes import client
    from kubernetes.stream import stream

    core = client.CoreV1Api(plane.api_client())
    output = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=container,
        command=["python3", "-c", PROBE, *targets],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    result: dict[str, bool] = json.loads(output.strip().splitlines()[-1])
    return result


def test_the_run_policies_hold_from_inside_an_agent_pod(
    node_plane: KindPlane, node_images: Images
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(node_plane.api_client())
    image = node_images.ref("scripted")
    run_a, run_b, open_ns = new_run_id(), new_run_id(), f"open-{uuid.uuid4().hex[:8]}"
    serve = ["python3", "-c", SERVE]
    sleep = ["python3", "-c", "import time; time.sleep(600)"]

    async def prepare() -> None:
        async with Kube.connect(kubeconfig=str(node_plane.kubeconfig)) as kube:
            for run_id in (run_a, run_b):
                owner = await prepare_run_namespace(kube, run_id)
                manifests = [
                    routing.router_service(run_id, ROUTER, [GATEWAY]),
                    *routing.network_policies(
                        run_id, controller_ports=[ROUTER, GATEWAY], bridge_ports=[BRIDGE]
                    ),
                ]
                for manifest in manifests:
                    await kube.apply(objects.owned(manifest, owner))

    anyio.run(prepare)
    core.create_namespace({"metadata": {"name": open_ns}})
    try:
        pods = {
            (run_a, "controller"): _pod(
                "controller", run_a, "controller", image, [*serve, str(ROUTER), str(GATEWAY)]
            ),
            (run_a, "bob"): _pod("bob", run_a, "agent", image, [*serve, str(BRIDGE)]),
            (run_a, "alice"): _pod("alice", run_a, "agent", image, sleep),
            (run_b, "controller"): _pod(
                "controller", run_b, "controller", image, [*serve, str(ROUTER)]
            ),
            (open_ns, "control"): _pod("control", open_ns, "none", image, sleep),
        }
        router_ip = core.read_namespaced_service(objects.ROUTER_SERVICE, run_a).spec.cluster_ip
        alice = pods[(run_a, "alice")]
        alice["spec"]["hostAliases"] = routing.host_aliases(run_a, router_ip)
        for (namespace, _), pod in pods.items():
            wait_until(
                f"the default ServiceAccount in {namespace}",
                lambda ns=namespace: core.read_namespaced_service_account("default", ns),
                30,
            )
            core.create_namespaced_pod(namespace, pod)

        def ip(namespace: str, name: str) -> Any:
            pod = core.read_namespaced_pod(name, namespace)
            return pod.status.pod_ip if pod.status.phase == "Running" else None

        ips = {key: wait_until(f"{key} Running", lambda k=key: ip(*k), 120) for key in pods}
        router_name = routing.router_host(run_a)
        allowed = [f"{router_name}:{ROUTER}", f"{ips[(run_a, 'controller')]}:{GATEWAY}"]
        refused = [
            f"{ips[(run_a, 'bob')]}:{BRIDGE}",  # another agent's bridge
            f"{ips[(run_b, 'controller')]}:{ROUTER}",  # another run's router
            "10.96.0.1:443",  # the Kubernetes API server
            "169.254.169.254:80",  # the metadata address
        ]
        expected = {**dict.fromkeys(allowed, True), **dict.fromkeys(refused, False)}
        # kube-router programs the policies within seconds of the pods' start: poll until then.
        deadline, seen = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            seen = _exec(node_plane, run_a, "alice", list(expected))
            if seen == expected:
                break
            time.sleep(1)
        assert seen == expected
        # The controller reaches the agents' bridges.
        bridge = f"{ips[(run_a, 'bob')]}:{BRIDGE}"
        assert _exec(node_plane, run_a, "controller", [bridge]) == {bridge: True}
        # Without policies the same addresses answer: the refusals above are the policies'.
        control = _exec(node_plane, open_ns, "control", ["10.96.0.1:443", "169.254.169.254:80"])
        assert control == {"10.96.0.1:443": True, "169.254.169.254:80": True}
    finally:
        for namespace in (run_a, run_b, open_ns):
            core.delete_namespace(namespace)
