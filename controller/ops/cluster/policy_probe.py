"""Whether the cluster enforces NetworkPolicy, checked once by ``cluster up`` with probe pods: a
server on the agents' nodes, a client that must reach it (the network works), then a default-deny
policy and a client that must be refused. A cluster that lets the second client through fails
open: the runs' default-deny policies would isolate nothing there, so ``up`` stops and names the
fix."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from controller.ops.cluster.kind import INSTALLED_BY
from controller.ops.cluster.steps import StepFailed
from controller.platforms.kubernetes.api import KubeError, Obj
from controller.platforms.kubernetes.kube import Kube
from controller.platforms.kubernetes.objects import restricted_container, restricted_pod

NAMESPACE = "society-policy-probe"
PORT = 8080
LIMIT_S = 180.0
CONNECT = (
    "import socket, sys, time\n"
    "want = sys.argv[2]\n"
    "for _ in range(15):\n"
    "    try:\n"
    f"        socket.create_connection((sys.argv[1], {PORT}), timeout=2).close()\n"
    "        got = 'reached'\n"
    "    except OSError:\n"
    "        got = 'refused'\n"
    "    if got == want:\n"
    "        sys.exit(0)\n"
    "    time.sleep(1)\n"
    "sys.exit(f'still {got} after 15 tries')\n"
)
"""The client: exits 0 once its connection to the server is ``want`` (``reached``/``refused``)."""
FIX = (
    "NetworkPolicy is not enforced on this cluster: a default-deny policy let a probe through, "
    "so the runs' policies would isolate no agent. kind's kindnetd fails open on a kernel "
    "without CONFIG_NFT_QUEUE; use a kernel with it, or a CNI that enforces here (kube-router: "
    "the node image of scripts/build-kind-node-image.sh ships it as its CNI, with "
    "`disableDefaultCNI`; see kind/README.md, 'NetworkPolicy')"
)


def _pod(name: str, image: str, command: list[str], nodes: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"probe": name}},
        "spec": {
            "nodeSelector": nodes,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": restricted_pod(),
            "containers": [{"name": name, "image": image, "command": command,
                            "securityContext": restricted_container()}],
        },
    }  # fmt: skip


DENY_ALL = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "deny-all", "namespace": NAMESPACE},
    "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
}


async def _until(what: str, check: Callable[[], Awaitable[Any]]) -> Any:
    with anyio.move_on_after(LIMIT_S):
        while True:
            found = await check()
            if found:
                return found
            await anyio.sleep(1)
    raise StepFailed(f"the NetworkPolicy probe's {what} did not happen in {LIMIT_S:.0f} s",
                     reason="policy-probe-stuck")  # fmt: skip


async def _client_result(kube: Kube, name: str) -> str:
    async def finished() -> str | None:
        pod = await kube.get("Pod", name, NAMESPACE)
        phase = str(((pod or {}).get("status") or {}).get("phase", ""))
        return phase if phase in ("Succeeded", "Failed") else None

    return str(await _until(f"client {name} finishing", finished))


async def check_enforcement(kube: Kube, image: str, nodes: dict[str, str]) -> str:
    """Run the probe in a namespace of its own (deleted after); ``StepFailed`` when the cluster
    fails open (``reason`` ``networkpolicy-not-enforced``)."""
    await kube.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": NAMESPACE, "labels": dict(INSTALLED_BY)}})  # fmt: skip
    try:
        return await _probe(kube, image, nodes)
    except KubeError as exc:  # an admission webhook that is not serving yet, a quota, ...
        raise StepFailed(
            f"the NetworkPolicy probe's pods were refused: {exc}; run `up` again "
            "once the cluster's webhooks answer",
            reason="policy-probe-refused",
        ) from None
    finally:
        with anyio.CancelScope(shield=True):
            await kube.delete("Namespace", NAMESPACE)


async def _probe(kube: Kube, image: str, nodes: dict[str, str]) -> str:
    await kube.apply(_pod("server", image, ["python", "-m", "http.server", str(PORT)], nodes))

    async def server_ip() -> str | None:
        pod = await kube.get("Pod", "server", NAMESPACE)
        status = (pod or {}).get("status") or {}
        running = status.get("phase") == "Running"
        return str(status["podIP"]) if running and status.get("podIP") else None

    address = str(await _until("server starting", server_ip))
    client = ["python", "-c", CONNECT, address]
    await kube.apply(_pod("reach", image, [*client, "reached"], nodes))
    if await _client_result(kube, "reach") != "Succeeded":
        raise StepFailed(
            f"the NetworkPolicy probe's client could not reach its server at {address} with no "
            "policy in place: pod networking is broken (check the CNI's pods in kube-system)",
            reason="pod-network-broken",
        )
    await kube.apply(DENY_ALL)
    await kube.apply(_pod("refused", image, [*client, "refused"], nodes))
    if await _client_result(kube, "refused") != "Succeeded":
        raise StepFailed(FIX, reason="networkpolicy-not-enforced")
    return "enforced: a default-deny policy refused the probe that reached its server before"
