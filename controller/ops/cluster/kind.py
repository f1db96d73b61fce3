"""What only a kind cluster needs: the cluster from ``kind/cluster.yaml``, the local registry
beside it (kind's documented local-registry recipe), and the Kueue and Agent Sandbox manifests,
applied with kubectl: the upstream release manifests, or those that
``scripts/build-kind-addon-images.sh`` renders from the Go module proxy's sources
(``--addons-from-source``, ``addon_sources.py``).

``--existing-kubeconfig`` replaces each part (no cluster is made there).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from controller.ops.checks.tools import read_versions
from controller.ops.cluster.kind_patches import patched_config
from controller.ops.cluster.steps import StepFailed
from controller.ops.repository import ROOT as REPO
from controller.settings import current

CLUSTER_CONFIG = REPO / "kind" / "cluster.yaml"
CI_HOST_DIR = REPO / "kind" / "host"
"""The project's CI host's patches (``--host-patches kind/host``)."""
VERSIONS = read_versions(REPO / "kind" / "versions.env")
CLUSTER_NAME = "society"
NETWORK = "kind"
"""The container network kind puts every cluster's nodes on (its default)."""
REGISTRY_NAME = "kind-registry"
REGISTRY_HOST = "localhost:5001"
"""Where this machine pushes; nodes reach the same registry as ``kind-registry:5000``."""
CONTAINERD_CERTS_DIR = "/etc/containerd/certs.d"
"""The nodes' registry ``config_path`` (``containerdConfigPatches`` in ``kind/cluster.yaml``)."""
INSTALLED_BY = {"society.run/installed-by": "cluster-up"}
"""The label of what `cluster up` made."""
LOCAL_PATH_DIR = "/var/local-path-provisioner"
"""Where kind's local-path provisioner makes volumes on each node."""
LOCAL_PATH_PROVISIONER = "rancher.io/local-path"
LEDGER_STORAGE_CLASS = "society-ledgers"
SANDBOX_WORKERS = 16
"""Sandboxes Agent Sandbox reconciles at once (its default, 100 unthrottled, timed out a
1,000-agent roster's creates on a loaded 2-core machine)."""
SANDBOX_REPLENISH_DELAY = "5s"
"""How long a warm pool waits, after claims took its sandboxes, before it makes replacements (its
default, 0, starts their pods while the claiming run's agents start on the same cores, and each
new pod makes the node's policy enforcer resync while the claimed pods wait for theirs)."""


def sandbox_flags() -> list[str]:
    """The Agent Sandbox controller's arguments a cluster up adds to the release's."""
    return [
        f"--sandbox-concurrent-workers={SANDBOX_WORKERS}",
        f"--sandbox-warm-pool-replenish-delay={SANDBOX_REPLENISH_DELAY}",
    ]


REGISTRY_IMAGE = (
    "docker.io/library/registry:2@sha256:"
    "a3d8aaa63ed8681a604f1dea0aa03f100d5895b6a58ace528858a7b332415373"
)  # registry 2.8.3
KUEUE_MANIFEST = (
    "https://github.com/kubernetes-sigs/kueue/releases/download/"
    f"{VERSIONS['KUEUE_VERSION']}/manifests.yaml"
)
SANDBOX_MANIFEST = (
    "https://github.com/kubernetes-sigs/agent-sandbox/releases/download/"
    f"{VERSIONS['AGENT_SANDBOX_VERSION']}/sandbox-with-extensions.yaml"
)
ADDONS = {
    "kueue": (KUEUE_MANIFEST, "kueue-system", "kueue-controller-manager"),
    "agent-sandbox": (SANDBOX_MANIFEST, "agent-sandbox-system", "agent-sandbox-controller"),
}


@dataclass(frozen=True, slots=True)
class KindHost:
    """One kind cluster on this machine: its name, the node provider (``docker`` or
    ``podman``), the node image (kind's default when ``None``) and a directory of host patches
    (``--host-patches``: ``cluster-patches.yaml`` merged into a copy of ``kind/cluster.yaml``,
    ``containers.conf`` given to podman as ``CONTAINERS_CONF``; see kind/host/)."""

    kind: Path
    engine: Path
    name: str = CLUSTER_NAME
    node_image: str | None = None
    host_patches: Path | None = None

    def env(self) -> dict[str, str]:
        """kind uses Docker unless told to use Podman."""
        env = dict(current().environ)
        if self.engine.name == "podman":
            env["KIND_EXPERIMENTAL_PROVIDER"] = "podman"
        if self.host_patches is not None and (self.host_patches / "containers.conf").is_file():
            env["CONTAINERS_CONF"] = str((self.host_patches / "containers.conf").resolve())
        return env

    def config(self, volumes: Path) -> str:
        """The kind config ``kind create`` reads (the user's file is never edited)."""
        config = cluster_config(volumes)
        if self.host_patches is None or not (self.host_patches / "cluster-patches.yaml").is_file():
            return config
        return patched_config(config, self.host_patches / "cluster-patches.yaml")

    def engine_run(self, argv: list[str], what: str) -> str:
        return _run([str(self.engine), *argv], "registry-failed", what, self.env())


def _run(argv: list[str], reason: str, what: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise StepFailed(f"{what} failed: {done.stderr.strip()[-800:]}", reason=reason)
    return done.stdout


def cluster_exists(host: KindHost) -> bool:
    clusters = _run([str(host.kind), "get", "clusters"], "kind-failed", "kind get clusters",
                    host.env())  # fmt: skip
    return host.name in clusters.split()


def network_exists(host: KindHost) -> bool:
    done = subprocess.run([str(host.engine), "network", "inspect", NETWORK], capture_output=True,
                          env=host.env())  # fmt: skip
    return done.returncode == 0


def remove_network(host: KindHost) -> bool:
    """Remove kind's network unless a container still uses it; ``True`` when removed."""
    users = _run([str(host.engine), "ps", "-a", "-q", "--filter", f"network={NETWORK}"],
                 "kind-failed", "listing the containers on kind's network", host.env())  # fmt: skip
    if users.split() or not network_exists(host):
        return False
    _run([str(host.engine), "network", "rm", NETWORK], "kind-delete-failed",
         "removing kind's network", host.env())  # fmt: skip
    return True


def cluster_config(volumes: Path) -> str:
    """``kind/cluster.yaml`` with every node's local-path volumes mounted from ``volumes``
    (kind's ``extraMounts``), so this machine reads the ledgers the runs' Jobs write there."""
    import yaml  # type: ignore[import-untyped]

    config = yaml.safe_load(CLUSTER_CONFIG.read_text())
    mount = {"hostPath": str(volumes.resolve()), "containerPath": LOCAL_PATH_DIR}
    for node in config["nodes"]:
        node["extraMounts"] = [*node.get("extraMounts", []), mount]
    return str(yaml.safe_dump(config, sort_keys=False))


def ledger_storage_class() -> dict[str, object]:
    """kind's local-path provisioner, keeping each volume when its claim goes."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": LEDGER_STORAGE_CLASS,
            "labels": dict(INSTALLED_BY),
        },
        "provisioner": LOCAL_PATH_PROVISIONER,
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


@dataclass(frozen=True, slots=True)
class Created:
    """What ``create_cluster`` made: the cluster, and kind's network with it."""

    cluster: bool
    network: bool
    """There was no kind network before this create."""


def create_cluster(host: KindHost, kubeconfig: Path, config: str) -> Created:
    """Create the cluster unless it exists; write its kubeconfig; what was made here.

    A create that fails leaves nothing of its own: kind removes the nodes it started, and the
    network kind made for it (when there was none before and no container uses it) is removed
    here, since no profile file records it for ``cluster down``."""
    env = host.env()
    created = Created(cluster=False, network=False)
    if not cluster_exists(host):
        config_file = kubeconfig.parent / f"{host.name}-kind-config.yaml"
        config_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        config_file.write_text(config)
        image = [] if host.node_image is None else ["--image", host.node_image]
        had_network = network_exists(host)
        try:
            _run(
                [str(host.kind), "create", "cluster", "--name", host.name, "--config",
                 str(config_file), *image, "--kubeconfig", str(kubeconfig), "--wait", "10m"],
                "kind-create-failed", "kind create cluster", env,
            )  # fmt: skip
        except StepFailed as failed:
            failed = node_image_hint(failed, host.node_image)
            if had_network or not remove_network(host):
                raise failed from None
            raise StepFailed(
                f"{failed}\n  (the '{NETWORK}' {host.engine.name} network that kind made for it "
                f"is removed)",
                reason=failed.reason,
            ) from None
        created = Created(cluster=True, network=not had_network)
    config = _run([str(host.kind), "get", "kubeconfig", "--name", host.name], "kind-failed",
                  "kind get kubeconfig", env)  # fmt: skip
    kubeconfig.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    kubeconfig.write_text(config)
    kubeconfig.chmod(0o600)
    return created


PULL_FAILURES = ("pinging container registry", "manifest unknown", "image not known")
"""What kind's provider says when the node image is neither on this machine nor pullable."""


def node_image_hint(failed: StepFailed, node_image: str | None) -> StepFailed:
    """``failed`` with the fix named when the node image could not be pulled: on a host that
    reaches no registry, the image is built here."""
    if node_image is None or not any(text in str(failed) for text in PULL_FAILURES):
        return failed
    return StepFailed(
        f"{failed.detail}\n  (the node image {node_image} is not on this machine and could not "
        "be pulled)",
        reason="node-image-missing",
        next_step="build it here: scripts/build-kind-node-image.sh (prints the image it made; "
        "pass that to --node-image), or pull it where a registry is reachable",
    )


def delete_cluster(host: KindHost, kubeconfig: Path) -> None:
    """``kind delete cluster``; ``kubeconfig`` is the file ``create_cluster`` wrote (kind
    removes its context there, not from the user's ~/.kube/config)."""
    _run([str(host.kind), "delete", "cluster", "--name", host.name, "--kubeconfig",
          str(kubeconfig)], "kind-delete-failed", "kind delete cluster", host.env())  # fmt: skip


def start_registry(host: KindHost, image: str = REGISTRY_IMAGE) -> bool:
    """Run the registry container on kind's network and point every node's containerd at it
    (``localhost:5001`` -> ``kind-registry:5000``); ``True`` when the container was made here."""
    running = subprocess.run([str(host.engine), "inspect", "-f", "{{.State.Running}}",
                              REGISTRY_NAME], capture_output=True, text=True)  # fmt: skip
    made = False
    if running.returncode != 0:
        port = REGISTRY_HOST.split(":")[1]
        host.engine_run(["run", "-d", "--restart=always", "-p", f"127.0.0.1:{port}:5000",
                         "--network", "bridge", "--name", REGISTRY_NAME, image],
                        "starting the registry container")  # fmt: skip
        made = True
    elif running.stdout.strip() != "true":
        host.engine_run(["start", REGISTRY_NAME], "starting the registry container")
    networks = host.engine_run(["inspect", "-f", "{{json .NetworkSettings.Networks}}",
                                REGISTRY_NAME], "reading the registry's networks")  # fmt: skip
    if f'"{NETWORK}"' not in networks:
        host.engine_run(["network", "connect", NETWORK, REGISTRY_NAME],
                        "connecting the registry to kind's network")  # fmt: skip
    nodes = _run([str(host.kind), "get", "nodes", "--name", host.name], "kind-failed",
                 "kind get nodes", host.env()).split()  # fmt: skip
    hosts = f'[host."http://{REGISTRY_NAME}:5000"]\n'
    directory = f"{CONTAINERD_CERTS_DIR}/{REGISTRY_HOST}"
    for node in nodes:
        host.engine_run(["exec", node, "mkdir", "-p", directory], f"configuring {node}")
        host.engine_run(["exec", node, "sh", "-c",
                         f"printf '%s' '{hosts}' > {directory}/hosts.toml"],
                        f"configuring {node}")  # fmt: skip
    return made


def remove_registry(engine: Path) -> None:
    """The registry container and its anonymous volume (the images pushed to it)."""
    subprocess.run([str(engine), "rm", "-f", "-v", REGISTRY_NAME], capture_output=True,
                   check=False)  # fmt: skip


def apply_addon(kubectl: Path, kubeconfig: Path, addon: str, manifest: str | None = None) -> str:
    """``kubectl apply --server-side`` the pinned release (or ``manifest``, a file) and wait for
    its controller."""
    upstream, namespace, deployment = ADDONS[addon]
    manifest = manifest or upstream
    base = [str(kubectl), "--kubeconfig", str(kubeconfig)]
    configured = addon == "agent-sandbox" and _configure_sandbox(base, namespace)
    _run([*base, "apply", "--server-side", "--force-conflicts", "-f", manifest],
         "addon-install-failed", f"applying {manifest}")  # fmt: skip
    if addon == "agent-sandbox" and manifest == upstream:
        _set_sandbox_flags(base, namespace, deployment)
    if configured:  # the controller reads its configuration once, at start
        _run([*base, "-n", namespace, "rollout", "restart", f"deployment/{deployment}"],
             "addon-install-failed", f"restarting {deployment}")  # fmt: skip
    _run([*base, "-n", namespace, "rollout", "status", f"deployment/{deployment}",
          "--timeout=300s"], "addon-install-failed", f"waiting for {deployment}")  # fmt: skip
    if manifest != upstream:
        return f"applied {Path(manifest).name}, rendered from the Go module proxy's source"
    return f"applied {manifest.rsplit('/', 3)[-2]}"


SANDBOX_CONFIG = "agent-sandbox-config"
"""Agent Sandbox's optional ConfigMap, mounted into its controller at /etc/sandbox-config."""


def sandbox_config(namespace: str) -> str:
    """Agent Sandbox's namespace and configuration as a manifest: claims may put the run's labels
    (``warm.LABEL_DOMAIN``) on the pods they claim."""
    from controller.platforms.kubernetes.warm import LABEL_DOMAIN

    return (
        f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---\n"
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {SANDBOX_CONFIG}\n"
        f"  namespace: {namespace}\n  labels:\n    society.run/installed-by: cluster-up\n"
        f"data:\n  allowed-label-domains: {LABEL_DOMAIN}\n"
    )


def _configure_sandbox(base: list[str], namespace: str) -> bool:
    """Apply ``sandbox_config``; ``True`` when its ConfigMap changed and a running controller
    must restart to read it."""
    done = subprocess.run([*base, "apply", "-f", "-"], input=sandbox_config(namespace),
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise StepFailed(
            f"applying {SANDBOX_CONFIG} failed: {done.stderr.strip()[-800:]}",
            reason="addon-install-failed",
        )
    changed = any(
        line.startswith(f"configmap/{SANDBOX_CONFIG}") and not line.endswith("unchanged")
        for line in done.stdout.splitlines()
    )
    running = subprocess.run([*base, "-n", namespace, "get", "deployment", "-o", "name"],
                             capture_output=True, text=True)  # fmt: skip
    return changed and bool(running.stdout.strip())


def _set_sandbox_flags(base: list[str], namespace: str, deployment: str) -> None:
    """Add ``sandbox_flags()`` to the controller's arguments, each unless its name is there."""
    found = _run([*base, "-n", namespace, "get", f"deployment/{deployment}", "-o",
                  "jsonpath={.spec.template.spec.containers[0].args}"],
                 "addon-install-failed", f"reading {deployment}'s arguments")  # fmt: skip
    for flag in sandbox_flags():
        if flag.split("=", 1)[0] in found:
            continue
        patch = (
            f'[{{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"{flag}"}}]'
        )
        _run([*base, "-n", namespace, "patch", f"deployment/{deployment}", "--type=json", "-p",
              patch], "addon-install-failed", f"setting {flag} on {deployment}")  # fmt: skip


def local_registry_hosting() -> dict[str, object]:
    """The ConfigMap by which tools find a cluster's local registry (KEP-1755)."""
    host = f'host: "{REGISTRY_HOST}"\nhelp: "https://kind.sigs.k8s.io/docs/user/local-registry/"\n'
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "local-registry-hosting", "namespace": "kube-public"},
        "data": {"localRegistryHosting.v1": host},
    }


def delete_addon(kubectl: Path, kubeconfig: Path, addon: str, manifest: str | None = None) -> None:
    manifest = manifest or ADDONS[addon][0]
    _run([str(kubectl), "--kubeconfig", str(kubeconfig), "delete", "--ignore-not-found",
          "--wait=true", "-f", manifest],
         "addon-delete-failed", f"deleting {manifest}")  # fmt: skip
