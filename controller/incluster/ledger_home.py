"""Bringing a controller Job's run directory home to the submitter's artifact root.

The controller Job writes the ledger to its volume (``SOCIETY_LEDGER_PVC``); the pod and its
namespace go at cleanup. When the claim's PersistentVolume is a directory on a node that this
machine also sees, the run directory is copied into the submitter's artifact root before the
namespace goes, and the result names the copy, so ``society ledger verify`` reads it as it reads
a local run's.

Where the node's directory is on this machine is the volume mapping (``SOCIETY_LEDGER_NODE_ROOT``
on the node, ``SOCIETY_LEDGER_HOST_ROOT`` here): kind mounts the nodes' local-path volumes
(``/var/local-path-provisioner``) into a directory under the artifact root (``cluster up``
writes the mapping into the profile file). Without a mapping nothing is copied and the result
keeps the in-pod path; the volume itself outlives the namespace on a ``Retain`` StorageClass.
"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath

import anyio

from controller.errors import SocietyError
from controller.incluster import access
from controller.platforms.kubernetes.kube import Kube, Obj
from controller.platforms.kubernetes.settings import KubernetesSettings
from controller.run import Progress, RunResult


class LedgerHomeError(SocietyError):
    """The claim's volume is not where the mapping says; ``reason`` is machine-readable."""

    reason = "ledger-not-home"


def volume_path(volume: Obj) -> str | None:
    """The node directory behind a PersistentVolume (``hostPath`` or ``local``), if any."""
    spec = volume.get("spec") or {}
    for kind in ("hostPath", "local"):
        path = (spec.get(kind) or {}).get("path")
        if path:
            return str(path)
    return None


def host_directory(node_path: str, node_root: str, host_root: str) -> Path | None:
    """``node_path`` seen from this machine, when it lies under ``node_root``."""
    inside, root = PurePosixPath(node_path), PurePosixPath(node_root)
    if inside != root and root not in inside.parents:
        return None
    return Path(host_root) / inside.relative_to(root)


def rehomed(result: RunResult, local_run_dir: Path) -> RunResult:
    """``result`` with its ledger paths pointing at the copy in ``local_run_dir``."""
    pod_run_dir = PurePosixPath(access.ARTIFACT_ROOT) / result.run_id

    def local(path: str) -> str:
        inside = PurePosixPath(path)
        if inside == pod_run_dir or pod_run_dir in inside.parents:
            return str(local_run_dir / inside.relative_to(pod_run_dir))
        return path

    receipt = result.receipt.model_copy(update={"ledger_dir": local(result.receipt.ledger_dir)})
    return result.model_copy(update={"ledger_dir": local(result.ledger_dir), "receipt": receipt})


async def bring_home(
    kube: Kube,
    result: RunResult,
    settings: KubernetesSettings,
    artifact_root: Path,
    progress: Progress,
) -> RunResult:
    """Copy the run directory from the claim's volume into ``artifact_root``; the result then
    names the copy. Unchanged without a claim or a mapping."""
    node_root, host_root = settings.ledger_node_root, settings.ledger_host_root
    if not settings.ledger_claim or not node_root or not host_root:
        return result
    run_id = result.run_id
    claim = await kube.get("PersistentVolumeClaim", settings.ledger_claim, run_id)
    bound = ((claim or {}).get("spec") or {}).get("volumeName")
    volume = await kube.get("PersistentVolume", bound) if bound else None
    node_path = volume_path(volume) if volume else None
    if node_path is None:
        raise LedgerHomeError(
            f"the ledger claim {run_id}/{settings.ledger_claim} is bound to no directory volume "
            f"(volume {bound or 'none'}); the ledger stays on the cluster"
        )
    source = host_directory(node_path, node_root, host_root)
    if source is None:
        raise LedgerHomeError(
            f"the ledger's volume {bound} is at {node_path} on its node, outside "
            f"SOCIETY_LEDGER_NODE_ROOT={node_root}; set the mapping to where the nodes keep "
            "volumes (kind: /var/local-path-provisioner)"
        )
    pod_run_dir = source / run_id
    if not (pod_run_dir / "ledger").is_dir():
        raise LedgerHomeError(
            f"no ledger at {pod_run_dir} (the volume {bound} mapped from {node_path}); is "
            f"SOCIETY_LEDGER_HOST_ROOT={host_root} where this machine sees {node_root}?"
        )
    destination = artifact_root / run_id
    await anyio.to_thread.run_sync(
        lambda: shutil.copytree(pod_run_dir, destination, dirs_exist_ok=True)
    )
    progress.phase(f"ledger: copied the run directory home to {destination}")
    return rehomed(result, destination)
