"""The real-pod tests' cluster: a kind cluster (``kind_cluster.KindCluster``) named
``society-kind-node`` on the node image built here, with Kueue and Agent Sandbox installed from
the manifests and images of scripts/build-kind-addon-images.sh, and the project's images
imported into the agents' node under their digests (pods reference them so; nothing is pulled).

What it adds to ``kind/cluster.yaml`` (the CI host's patches aside) is the tests' own, and only in
the copy the tests create from: no host ports (``kind/cluster.yaml``'s 17233 and 18233 belong to
``society cluster up --profile kind``, which tests/kind runs), and this plane's work directory
mounted at the same path in every node (kind's ``extraMounts``), so a hostPath volume there is a
directory this machine reads. The agents' pods reach this machine at the gateway of the cluster's
podman network, as pods on kind reach a laptop; and this machine reaches the pods (the debugging
mode's controller dials their bridges) by a route to each node's pod range through that node's
address, which a Linux user of the debugging mode adds the same way (``ip route``; kind adds
none), removed again at stop. 169.254.169.254:80 answers HTTP on the agents'
node, as a cloud's metadata endpoint does: a test that a pod cannot reach it means something only
if it answers.

Test-only: nothing here is imported by ``controller``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cp_images import Images
from kind_cluster import CLUSTER_CONFIG, KindCluster, script_output

from controller.ops.cluster import addon_sources
from controller.ops.cluster.kind import apply_addon
from controller.ops.cluster.kind_patches import CI_HOST_PATCHES, patched_config

NAME = "society-kind-node"
AGENT_POOL = ("society.run/pool", "agents")
"""kind/cluster.yaml's label on the agents' node: where every pod of the tests runs."""
METADATA_ADDRESS = "169.254.169.254"
METADATA_NAMESPACE = "society-test-metadata"
NODE_IMAGES = ("python", "controller", "openclaw", "nanoclaw")
"""The images the agents' node imports (python serves the scripted, llm and peer runtimes; the
run worker's image runs in no pod of these tests)."""


@dataclass(frozen=True)
class KindNetwork:
    """The cluster's podman network as this machine sees it."""

    host_ip: str
    """The network's gateway: this machine's address on the nodes' bridge, where the agents'
    pods reach a controller, a router or a server that runs here."""


@dataclass(frozen=True)
class KindNode:
    """The agents' node: one container of the cluster."""

    cluster: KindCluster
    name: str

    def ctr(self, *args: str) -> str:
        """``ctr -n k8s.io ARGS`` against the node's containerd (inside its container)."""
        return self.cluster.podman("exec", self.name, "ctr", "-n", "k8s.io", *args)

    @property
    def containerd_socket(self) -> Path:
        """The node's containerd socket, reached from this machine through the container's root
        (``/proc/<pid>/root``), as a tool on a machine that is the node reaches it."""
        pid = self.cluster.podman("inspect", "-f", "{{.State.Pid}}", self.name).strip()
        return Path(f"/proc/{pid}/root/run/containerd/containerd.sock")


def node_config(workdir: Path, max_pods: int = 110) -> str:
    """``kind/cluster.yaml`` with the CI host's patches, without host ports, with ``workdir``
    mounted at its own path in every node, the kubelets' ``maxPods`` set (110: their default)."""
    import yaml  # type: ignore[import-untyped]

    config = yaml.safe_load(patched_config(CLUSTER_CONFIG.read_text(), CI_HOST_PATCHES))
    kubelet = f"kind: KubeletConfiguration\nmaxPods: {max_pods}\n"
    config["kubeadmConfigPatches"] = [*config.get("kubeadmConfigPatches", []), kubelet]
    for node in config["nodes"]:
        node.pop("extraPortMappings", None)
        mount = {"hostPath": str(workdir), "containerPath": str(workdir)}
        node["extraMounts"] = [*node.get("extraMounts", []), mount]
    return str(yaml.safe_dump(config, sort_keys=False))


class KindPlane:
    """``with KindPlane(images) as plane:``: the cluster made, the add-ons and images in; on exit
    the cluster deleted (``kind delete``, then its podman network) and the work directory gone."""

    def __init__(
        self, images: Images, *, keep_workdir: bool = False, max_pods: int = 110, name: str = NAME
    ) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="society-kind-node-"))
        self.keep_workdir = keep_workdir
        self.images = images.snapshot(self.workdir / "images")
        node_dir = Path(script_output("build-kind-node-image.sh", "--print-dir"))
        self.cluster = KindCluster(
            kind=Path(script_output("install-kind.sh")),
            kubectl_path=node_dir / "bin" / "kubectl",
            image=script_output("build-kind-node-image.sh", "--print-image"),
            workdir=self.workdir,
            name=name,
            config=node_config(self.workdir, max_pods),
        )
        self.network: KindNetwork | None = None
        self.node: KindNode | None = None
        self.routes: list[list[str]] = []
        """``ip route`` arguments of the routes ``start`` added (``stop`` deletes them)."""

    # public surface ---------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    @property
    def address(self) -> str:
        """Where this machine's servers listen for the cluster's pods."""
        assert self.network is not None
        return self.network.host_ip

    @property
    def bin_dir(self) -> Path:
        """Where the control-plane build's ``ctr`` is (``cluster up --node-containerd``)."""
        return Path(script_output("build-control-plane.sh")) / "bin"

    def api_client(self) -> Any:
        """A new admin ``kubernetes.client.ApiClient``."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    # lifecycle --------------------------------------------------------------------

    def __enter__(self) -> KindPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        self.cluster.delete_leftover()
        self.cluster.create()
        # kind's podman network is dual-stack; the cluster (kind/cluster.yaml) is IPv4 only.
        gateways = [subnet["gateway"] for subnet in self.cluster.network()["subnets"]]
        self.network = KindNetwork(host_ip=next(g for g in gateways if ":" not in g))
        key, value = AGENT_POOL
        names = "jsonpath={.items[*].metadata.name}"
        found = self.cluster.kubectl("get", "nodes", "-l", f"{key}={value}", "-o", names)
        agents = found.stdout.split()
        assert len(agents) == 1, agents
        self.node = KindNode(self.cluster, agents[0])
        for ref, archive in sorted(self.images.archives.items()):
            if ref.split("@", 1)[0].rsplit("/", 1)[-1] in NODE_IMAGES:
                self.cluster.import_image(ref, Path(archive), nodes=agents)
        built = addon_sources.build_addons()
        for addon in ("kueue", "agent-sandbox"):
            image = built.addons[addon]
            self._import_local_image(image.image, agents)
            manifest = self._local_manifest(addon, image)
            apply_addon(self.cluster.kubectl_path, self.kubeconfig, addon, str(manifest))
        self._route_pod_ranges()
        self._start_metadata()

    def _route_pod_ranges(self) -> None:
        """A route on this machine to each node's pod range through the node's address."""
        nodes = json.loads(self.cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        for node in nodes:
            addresses = node["status"]["addresses"]
            address = next(a["address"] for a in addresses if a["type"] == "InternalIP")
            route = [node["spec"]["podCIDR"], "via", address]
            subprocess.run(["ip", "route", "replace", *route], check=True, capture_output=True)
            self.routes.append(route)

    def _start_metadata(self) -> None:
        """An HTTP server on 169.254.169.254:80 of the agents' node: the address on the node's
        loopback, the server a host-network pod from the python image."""
        assert self.node is not None
        self.cluster.node_shell(self.node.name, f"ip addr add {METADATA_ADDRESS}/32 dev lo")
        server = ["python3", "-m", "http.server", "80", "--bind", METADATA_ADDRESS,
                  "--directory", "/tmp"]  # fmt: skip
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "metadata", "namespace": METADATA_NAMESPACE},
            "spec": {
                "hostNetwork": True,
                "nodeName": self.node.name,
                "automountServiceAccountToken": False,
                "containers": [{"name": "metadata", "image": self.images.ref("scripted"),
                                "command": server, "securityContext": {"runAsUser": 0}}],
            },
        }  # fmt: skip
        namespace = {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": METADATA_NAMESPACE}}  # fmt: skip
        self.cluster.apply(namespace)
        self.cluster.apply(pod)
        self.cluster.kubectl("-n", METADATA_NAMESPACE, "wait", "--for=condition=Ready",
                             "pod/metadata", "--timeout=120s", timeout=150)  # fmt: skip

    def _local_manifest(self, addon: str, built: addon_sources.AddonImage) -> Path:
        """The add-on's rendered manifest as ``cluster up --addons-from-source`` applies it, but
        with its image taken from the nodes' containerd (``imagePullPolicy: IfNotPresent``; the
        upstream manifests say ``Always``) where ``cluster up`` pushes it to the local registry:
        this cluster has none."""
        import yaml  # type: ignore[import-untyped]

        text = built.manifest.read_text()
        if addon == "agent-sandbox":
            text = addon_sources.with_sandbox_flags(text)
        documents = [d for d in yaml.safe_load_all(text) if d]
        for document in documents:
            if document.get("kind") != "Deployment":
                continue
            for container in document["spec"]["template"]["spec"]["containers"]:
                if container.get("image") == built.image:
                    container["imagePullPolicy"] = "IfNotPresent"
        path = self.workdir / f"{addon}.yaml"
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        return path

    def _import_local_image(self, image: str, nodes: list[str]) -> None:
        """An image of podman's storage into the nodes' containerd under its own name."""
        archive = self.workdir / "images" / f"{image.rsplit('/', 1)[-1].replace(':', '-')}.tar"
        self.cluster.podman("save", "--format", "oci-archive", "-o", str(archive), image)
        self.cluster.import_archive(archive, image.split(":")[0], nodes)
        archive.unlink()

    def stop(self) -> None:
        for route in self.routes:
            subprocess.run(["ip", "route", "del", *route], capture_output=True, check=False)
        self.routes.clear()
        try:
            self.cluster.delete()
        finally:
            if not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
