"""The tests' kind cluster: ``kind create`` from ``kind/cluster.yaml`` with the CI host's patches
merged in (controller/ops/cluster/kind_patches.py), on the node image that
scripts/build-kind-node-image.sh builds here, with kind's podman provider.

Its names are its own (cluster and podman network ``society-kind-test``; the real-pod tests'
cluster, kind_plane.py, is ``society-kind-node``), so it runs beside them and a user's
``society`` cluster. Its host ports are
kind/cluster.yaml's (127.0.0.1:17233 and :18233), which no other test binds.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.ops.cluster.kind_patches import CI_CONTAINERS_CONF, CI_HOST_PATCHES, patched_config

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_CONFIG = ROOT / "kind" / "cluster.yaml"
NAME = "society-kind-test"
ENABLE_HINT = (
    "the kind tests need podman, mmdebstrap and Go >= 1.26: run scripts/install-node.sh, "
    "scripts/install-kind.sh and scripts/build-kind-node-image.sh"
)


def script_output(*argv: str) -> str:
    """The last stdout line of one of the repository's scripts (they print a path there)."""
    done = subprocess.run([str(ROOT / "scripts" / argv[0]), *argv[1:]], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def podman_names(kind: str, *filters: str) -> set[str]:
    """The names of podman's containers, networks or volumes (``kind``), ``--filter`` applied."""
    command = {"container": ["ps", "-a"], "network": ["network", "ls"], "volume": ["volume", "ls"]}
    template = "{{.Names}}" if kind == "container" else "{{.Name}}"
    argv = ["podman", *command[kind], "--format", template]
    argv += [f"--filter={f}" for f in filters]
    return set(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split())


@dataclass(frozen=True)
class HostFootprint:
    """Where a cluster shows on this machine: its nodes' container ids and root filesystems, and
    its podman network's bridge."""

    container_ids: tuple[str, ...]
    merged_dirs: tuple[str, ...]
    bridge: str

    def traces(self, name: str) -> dict[str, list[str]]:
        """What of the cluster ``name`` is on this machine now (empty lists: nothing): containers,
        volumes, its network, mounts, interfaces, firewall rules."""
        label = f"label=io.x-k8s.kind.cluster={name}"
        traces = {
            "container": sorted(podman_names("container", label) | {
                n for n in podman_names("container") if n.startswith(f"{name}-")}),
            "volume": sorted(podman_names("volume", label) | {
                n for n in podman_names("volume") if n.startswith(f"{name}-")}),
            "network": sorted(n for n in podman_names("network") if n == name),
        }  # fmt: skip
        marks = [*self.container_ids, *self.merged_dirs]
        traces["mount"] = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                           if any(mark in line for mark in marks)]  # fmt: skip
        links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True,
                                          check=True).stdout)  # fmt: skip
        traces["interface"] = [link["ifname"] for link in links if self.bridge and self.bridge in
                               (link["ifname"], link.get("master"))]  # fmt: skip
        # podman's CNI rules for the network carry its name in their comments.
        rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
        traces["firewall rule"] = [line for line in rules.splitlines() if f'\\"{name}\\"' in line]
        return traces


def wait_until(what: str, check: Callable[[], bool], timeout: float, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


@dataclass
class KindCluster:
    """One kind cluster made by ``create`` and removed by ``delete``."""

    kind: Path
    kubectl_path: Path
    image: str
    workdir: Path
    name: str = NAME
    config: str | None = None
    """The kind config to create from; default: kind/cluster.yaml with the CI host's patches."""
    created_s: float = 0.0
    deleted: bool = False

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def env(self) -> dict[str, str]:
        """kind's podman provider on a network of this cluster's own, with the host's ulimits."""
        return {
            **os.environ,
            "KIND_EXPERIMENTAL_PROVIDER": "podman",
            "KIND_EXPERIMENTAL_PODMAN_NETWORK": self.name,
            "CONTAINERS_CONF": str(CI_CONTAINERS_CONF),
        }

    def create(self) -> None:
        config = self.workdir / "kind-config.yaml"
        config.write_text(self.config or patched_config(CLUSTER_CONFIG.read_text(),
                                                        CI_HOST_PATCHES))  # fmt: skip
        started = time.monotonic()
        self._run([str(self.kind), "create", "cluster", "--name", self.name, "--config",
                   str(config), "--image", self.image, "--kubeconfig", str(self.kubeconfig),
                   "--wait", "10m"])  # fmt: skip
        self.created_s = time.monotonic() - started

    def footprint(self) -> HostFootprint:
        nodes = self.nodes()
        inspected = json.loads(self.podman("inspect", *nodes))
        return HostFootprint(
            container_ids=tuple(c["Id"] for c in inspected),
            merged_dirs=tuple(c["GraphDriver"]["Data"]["MergedDir"] for c in inspected),
            bridge=self.network().get("network_interface", ""),
        )

    def network(self) -> dict[str, Any]:
        """``podman network inspect`` of the cluster's own network."""
        found: dict[str, Any] = json.loads(self.podman("network", "inspect", self.name))[0]
        return found

    def delete_leftover(self) -> None:
        """Delete a cluster of this name that an interrupted session left (a killed pytest);
        nothing happens when there is none (``kind delete`` of no cluster succeeds)."""
        self._remove()

    def delete(self) -> None:
        """``kind delete cluster``, then the podman network kind made for it."""
        if self.deleted:
            return
        self.deleted = True
        self._remove()

    def _remove(self) -> None:
        self._run([str(self.kind), "delete", "cluster", "--name", self.name])
        if self.name in podman_names("network"):
            self.podman("network", "rm", self.name)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
        done = subprocess.run([str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig),
                               *args], input=input, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))

    def nodes(self) -> list[str]:
        return self._run([str(self.kind), "get", "nodes", "--name", self.name]).split()

    def import_image(self, ref: str, archive: Path, nodes: list[str] | None = None) -> None:
        """Import one of scripts/build-images.sh's OCI archives into the containerd of every
        node (or of ``nodes``) under ``ref`` (``name@sha256:...``), as ``society cluster`` does
        for existing nodes."""
        name = ref.split("@", 1)[0]
        for node in nodes or self.nodes():
            self.import_archive(archive, name, [node])
            self.podman("exec", node, "ctr", "-n", "k8s.io", "images", "tag", "--force",
                        f"{name}:build", ref)  # fmt: skip

    def import_archive(self, archive: Path, base_name: str, nodes: list[str]) -> None:
        """``ctr images import --base-name base_name`` of an OCI archive on this machine into
        the containerd of ``nodes``."""
        ctr = ["ctr", "-n", "k8s.io", "images", "import", "--base-name", base_name, "-"]
        for node in nodes:
            with archive.open("rb") as stream:
                done = subprocess.run(["podman", "exec", "-i", node, *ctr], stdin=stream,
                                      capture_output=True, env=self.env())  # fmt: skip
            if done.returncode != 0:
                raise AssertionError(f"importing {archive} into {node}: {done.stderr!r}")

    def node_shell(self, node: str, script: str) -> str:
        """``sh -c script`` inside one node's container."""
        return self.podman("exec", node, "sh", "-c", script)

    def podman(self, *args: str) -> str:
        """``podman ARGS`` with this cluster's environment; its stdout."""
        return self._run(["podman", *args])

    def _run(self, argv: list[str]) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env())
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}):\n"
                                 f"{done.stderr.strip()[-3000:]}")  # fmt: skip
        return done.stdout
