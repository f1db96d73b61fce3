"""What only a kind cluster needs: the cluster from ``kind/cluster.yaml``, the local registry
beside it (kind's documented local-registry recipe), and the upstream Kueue and Agent Sandbox
release manifests, applied with kubectl.

None of this runs in the project's tests (kind's nodes need Docker or Podman, the manifests
and the registry image come from the internet); ``--existing-kubeconfig`` replaces each part.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from controller.ops.checks.tools import read_versions
from controller.ops.cluster.steps import StepFailed
from controller.ops.repository import ROOT as REPO

CLUSTER_CONFIG = REPO / "kind" / "cluster.yaml"
VERSIONS = read_versions(REPO / "kind" / "versions.env")
CLUSTER_NAME = "society"
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
"""Sandboxes Agent Sandbox reconciles at once (its default, 1, paces a large roster's pods)."""
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
    f"{VERSIONS['AGENT_SANDBOX_VERSION']}/manifest.yaml"
)
ADDONS = {
    "kueue": (KUEUE_MANIFEST, "kueue-system", "kueue-controller-manager"),
    "agent-sandbox": (SANDBOX_MANIFEST, "agent-sandbox-system", "agent-sandbox-controller"),
}


def _run(argv: list[str], reason: str, what: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise StepFailed(f"{what} failed: {done.stderr.strip()[-800:]}", reason=reason)
    return done.stdout


def _kind_env(engine: Path) -> dict[str, str]:
    """kind uses Docker unless told to use Podman."""
    env = dict(os.environ)
    if engine.name == "podman":
        env["KIND_EXPERIMENTAL_PROVIDER"] = "podman"
    return env


def cluster_exists(kind: Path, engine: Path) -> bool:
    clusters = _run([str(kind), "get", "clusters"], "kind-failed", "kind get clusters",
                    _kind_env(engine))  # fmt: skip
    return CLUSTER_NAME in clusters.split()


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


def create_cluster(kind: Path, engine: Path, kubeconfig: Path, config: str) -> bool:
    """Create the cluster unless it exists; write its kubeconfig; ``True`` when created here."""
    env = _kind_env(engine)
    created = False
    if not cluster_exists(kind, engine):
        config_file = kubeconfig.parent / f"{CLUSTER_NAME}-kind-config.yaml"
        config_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        config_file.write_text(config)
        _run(
            [str(kind), "create", "cluster", "--name", CLUSTER_NAME, "--config",
             str(config_file), "--wait", "5m"],
            "kind-create-failed", "kind create cluster", env,
        )  # fmt: skip
        created = True
    config = _run([str(kind), "get", "kubeconfig", "--name", CLUSTER_NAME], "kind-failed",
                  "kind get kubeconfig", env)  # fmt: skip
    kubeconfig.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    kubeconfig.write_text(config)
    kubeconfig.chmod(0o600)
    return created


def delete_cluster(kind: Path, engine: Path) -> None:
    _run([str(kind), "delete", "cluster", "--name", CLUSTER_NAME], "kind-delete-failed",
         "kind delete cluster", _kind_env(engine))  # fmt: skip


def start_registry(engine: Path, kind: Path) -> bool:
    """Run the registry container on kind's network and point every node's containerd at it
    (``localhost:5001`` -> ``kind-registry:5000``); ``True`` when the container was made here."""
    e = str(engine)
    running = subprocess.run([e, "inspect", "-f", "{{.State.Running}}", REGISTRY_NAME],
                             capture_output=True, text=True)  # fmt: skip
    made = False
    if running.returncode != 0:
        port = REGISTRY_HOST.split(":")[1]
        _run([e, "run", "-d", "--restart=always", "-p", f"127.0.0.1:{port}:5000",
              "--network", "bridge", "--name", REGISTRY_NAME, REGISTRY_IMAGE],
             "registry-failed", "starting the registry container")  # fmt: skip
        made = True
    elif running.stdout.strip() != "true":
        _run([e, "start", REGISTRY_NAME], "registry-failed", "starting the registry container")
    networks = _run([e, "inspect", "-f", "{{json .NetworkSettings.Networks}}", REGISTRY_NAME],
                    "registry-failed", "reading the registry's networks")  # fmt: skip
    if '"kind"' not in networks:
        _run([e, "network", "connect", "kind", REGISTRY_NAME], "registry-failed",
             "connecting the registry to kind's network")  # fmt: skip
    nodes = _run([str(kind), "get", "nodes", "--name", CLUSTER_NAME], "kind-failed",
                 "kind get nodes", _kind_env(engine)).split()  # fmt: skip
    hosts = f'[host."http://{REGISTRY_NAME}:5000"]\n'
    directory = f"{CONTAINERD_CERTS_DIR}/{REGISTRY_HOST}"
    for node in nodes:
        _run([e, "exec", node, "mkdir", "-p", directory], "registry-failed", f"configuring {node}")
        _run([e, "exec", node, "sh", "-c", f"printf '%s' '{hosts}' > {directory}/hosts.toml"],
             "registry-failed", f"configuring {node}")  # fmt: skip
    return made


def remove_registry(engine: Path) -> None:
    subprocess.run([str(engine), "rm", "-f", REGISTRY_NAME], capture_output=True, check=False)


def apply_addon(kubectl: Path, kubeconfig: Path, addon: str) -> str:
    """``kubectl apply --server-side`` the pinned release and wait for its controller."""
    manifest, namespace, deployment = ADDONS[addon]
    base = [str(kubectl), "--kubeconfig", str(kubeconfig)]
    _run([*base, "apply", "--server-side", "--force-conflicts", "-f", manifest],
         "addon-install-failed", f"applying {manifest}")  # fmt: skip
    if addon == "agent-sandbox":
        _set_sandbox_workers(base, namespace, deployment)
    _run([*base, "-n", namespace, "rollout", "status", f"deployment/{deployment}",
          "--timeout=300s"], "addon-install-failed", f"waiting for {deployment}")  # fmt: skip
    return f"applied {manifest.rsplit('/', 3)[-2]}"


def _set_sandbox_workers(base: list[str], namespace: str, deployment: str) -> None:
    """Add ``--sandbox-concurrent-workers`` to the controller's arguments unless present."""
    found = _run([*base, "-n", namespace, "get", f"deployment/{deployment}", "-o",
                  "jsonpath={.spec.template.spec.containers[0].args}"],
                 "addon-install-failed", f"reading {deployment}'s arguments")  # fmt: skip
    if "--sandbox-concurrent-workers" in found:
        return
    flag = f"--sandbox-concurrent-workers={SANDBOX_WORKERS}"
    patch = f'[{{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"{flag}"}}]'
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


def delete_addon(kubectl: Path, kubeconfig: Path, addon: str) -> None:
    manifest = ADDONS[addon][0]
    _run([str(kubectl), "--kubeconfig", str(kubeconfig), "delete", "--ignore-not-found",
          "--wait=true", "-f", manifest],
         "addon-delete-failed", f"deleting {manifest}")  # fmt: skip
