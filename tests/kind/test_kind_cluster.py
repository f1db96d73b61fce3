"""A real kind cluster, made here: ``kind create`` from ``kind/cluster.yaml`` on the locally built
node image, a pod on the agents' node answering a pod on the control-plane node, a Service by its
cluster DNS name (CoreDNS, kube-proxy), a claim of the default class on local-path, a
default-deny NetworkPolicy that kube-router enforces (the probe that got through before is
refused), and ``kind delete`` leaving nothing of the cluster on this machine.

The tests run in file order on one session cluster; the last one deletes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kind_cluster import KindCluster, podman_names, wait_until

pytestmark = pytest.mark.slow

NAMESPACE = "kind-probe"
PORT = 8080
IMAGES = Path(
    os.environ.get("SOCIETY_IMAGE_DIR") or Path.home() / ".cache" / "society-runner" / "images"
)
PROBE = (
    "import socket, sys\n"
    "try:\n"
    f"    socket.create_connection((sys.argv[1], {PORT}), timeout=3).close()\n"
    "except OSError as error:\n"
    "    sys.exit(f'refused: {error}')\n"
)


def _python_image(cluster: KindCluster) -> str:
    """scripts/build-images.sh's python image, imported into the nodes once (under the build's
    lock, so a build running beside the tests does not swap the archive mid-import)."""
    with (IMAGES / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        built = json.loads((IMAGES / "images.json").read_text())
        ref: str = built["images"]["society/scripted:dev"]
        present = cluster.kubectl("get", "nodes", "-o", "json").stdout
        if ref.split("@")[1] not in present:
            cluster.import_image(ref, Path(built["archives"][ref]))
    return ref


def _pod(name: str, image: str, command: list[str], on: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {
            "nodeSelector": on,
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": name, "image": image, "command": command}],
        },
    }


def _probe(cluster: KindCluster, target: str) -> bool:
    """Whether the client pod opens a TCP connection to ``target``:PORT."""
    done = cluster.kubectl("-n", NAMESPACE, "exec", "client", "--", "python", "-c", PROBE, target,
                           check=False, timeout=30)  # fmt: skip
    return done.returncode == 0


@pytest.fixture(scope="module")
def server_ip(kind_cluster: KindCluster) -> str:
    """A server pod on the agents' node and a client pod on the control-plane node, both ready;
    the server's pod IP."""
    image = _python_image(kind_cluster)
    kind_cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kind_cluster.apply(
        _pod("server", image, ["python", "-m", "http.server", str(PORT)],
             {"society.run/pool": "agents"}),
        _pod("client", image, ["sleep", "infinity"],
             {"node-role.kubernetes.io/control-plane": ""}),
    )  # fmt: skip
    kind_cluster.kubectl("-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/server",
                         "pod/client", "--timeout=300s", timeout=320)  # fmt: skip
    pod = json.loads(kind_cluster.kubectl("-n", NAMESPACE, "get", "pod", "server", "-o",
                                          "json").stdout)  # fmt: skip
    return str(pod["status"]["podIP"])


def test_a_pod_on_the_agents_node_answers_a_pod_on_the_control_plane_node(
    kind_cluster: KindCluster, server_ip: str
) -> None:
    nodes = json.loads(kind_cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert len(nodes) == 2 and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
        for n in nodes
    )
    pod = json.loads(kind_cluster.kubectl("-n", NAMESPACE, "get", "pod", "server", "-o",
                                          "json").stdout)  # fmt: skip
    agents = [n["metadata"]["name"] for n in nodes
              if n["metadata"]["labels"].get("society.run/pool") == "agents"]  # fmt: skip
    assert pod["spec"]["nodeName"] in agents
    wait_until("the client's probe to reach the server", lambda: _probe(kind_cluster, server_ip),
               timeout=60)  # fmt: skip


def test_a_pod_reaches_a_service_by_its_cluster_dns_name(
    kind_cluster: KindCluster, server_ip: str
) -> None:
    kind_cluster.apply({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "server", "namespace": NAMESPACE},
        "spec": {"selector": {"app": "server"}, "ports": [{"port": PORT, "targetPort": PORT}]},
    })  # fmt: skip
    name = f"server.{NAMESPACE}.svc.cluster.local"
    wait_until(f"{name} to answer through CoreDNS and kube-proxy",
               lambda: _probe(kind_cluster, name), timeout=120)  # fmt: skip


def test_a_claim_of_the_default_class_binds_on_local_path_under_the_nodes_var(
    kind_cluster: KindCluster,
) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    }
    writer = _pod("writer", _python_image(kind_cluster),
                  ["sh", "-c", "echo written-in-kind > /data/proof"],
                  {"society.run/pool": "agents"})  # fmt: skip
    writer["spec"]["restartPolicy"] = "Never"
    writer["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    writer["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    kind_cluster.apply(claim, writer)
    kind_cluster.kubectl("-n", NAMESPACE, "wait", "--for=jsonpath={.status.phase}=Succeeded",
                         "pod/writer", "--timeout=300s", timeout=320)  # fmt: skip
    volume = json.loads(kind_cluster.kubectl("-n", NAMESPACE, "get", "pvc", "data", "-o",
                                             "json").stdout)["spec"]["volumeName"]  # fmt: skip
    node = json.loads(kind_cluster.kubectl("-n", NAMESPACE, "get", "pod", "writer", "-o",
                                           "json").stdout)["spec"]["nodeName"]  # fmt: skip
    found = kind_cluster.node_shell(node, f"cat /var/local-path-provisioner/{volume}_*/proof")
    assert found.strip() == "written-in-kind"


def test_a_default_deny_policy_refuses_the_probe_that_reached_the_pod_before(
    kind_cluster: KindCluster, server_ip: str
) -> None:
    assert _probe(kind_cluster, server_ip), "the probe must reach the server before any policy"
    kind_cluster.apply({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny", "namespace": NAMESPACE},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    })  # fmt: skip
    wait_until("the default-deny policy to refuse the probe",
               lambda: not _probe(kind_cluster, server_ip), timeout=60)  # fmt: skip
    # Refused by the policy, not a broken pod: allowing the client lets the same probe through.
    kind_cluster.apply({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "allow-client", "namespace": NAMESPACE},
        "spec": {
            "podSelector": {"matchLabels": {"app": "server"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}],
        },
    })  # fmt: skip
    wait_until("the allow policy to let the probe through", lambda: _probe(kind_cluster, server_ip),
               timeout=60)  # fmt: skip


def test_the_nodes_have_no_task_limit_from_the_container_engine(kind_cluster: KindCluster) -> None:
    """Podman gives a container a pids limit of 2,048 unless told otherwise (kind on Docker gets
    none): a node running 200 agent pods (a pause process, two programs, a containerd shim and
    its threads each) hit it, and runc's forks failed with EAGAIN. The host patch lifts it."""
    nodes = podman_names("container", f"label=io.x-k8s.kind.cluster={kind_cluster.name}")
    assert len(nodes) == 2, nodes
    for node in sorted(nodes):
        limit = subprocess.run(["podman", "exec", node, "cat", "/sys/fs/cgroup/pids/pids.max"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert limit.strip() == "max", (node, limit)


def test_deleting_the_cluster_leaves_no_container_network_volume_mount_interface_or_rule(
    kind_cluster: KindCluster,
) -> None:
    footprint = kind_cluster.footprint()
    before = footprint.traces(kind_cluster.name)
    assert all(before[kind] for kind in ("container", "network", "mount", "interface",
                                         "firewall rule")), before  # fmt: skip
    kind_cluster.delete()
    after = footprint.traces(kind_cluster.name)
    assert after == {kind: [] for kind in before}, after
