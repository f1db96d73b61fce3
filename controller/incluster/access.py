"""The workloads that carry the run's identities: the controller Job (the controller's
ServiceAccount) and the run worker Deployment. What those identities may do is ``rbac``.

The controller can touch only its run's namespace, and there only what a run needs; it reads no
Secret (it writes its agents' and deletes them) and creates no pod itself (Agent Sandbox does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import controller.settings as s
from controller.platforms.kubernetes.kube import Obj
from controller.platforms.kubernetes.objects import (
    CONTROLLER_ACCOUNT,
    MANAGED_BY,
    ROLE_LABEL,
    manifest,
    restricted_container,
    restricted_pod,
    run_metadata,
    run_secret,
)
from controller.platforms.kubernetes.rbac import RUNSPEC_CONFIGMAP, SYSTEM_NAMESPACE, WORKER_ACCOUNT

RUNSPEC_DIR = "/etc/society/runspec"
CONTROLLER_JOB = "society-controller"
ARTIFACT_ROOT = "/var/lib/society/artifacts"
SIGNING_DIR = "/var/run/society/signing"
SIGNING_KEY_FILE = "key.pem"
SIGNING_SECRET = "society-signing-key"
"""The per-run Secret holding the operator's key for the controller Job's signer container."""
SIGNER_SOCKET_VARIABLE = s.SIGNER_SOCKET.name
SIGNER_CONTAINER = "signer"
"""The controller Job's signer: the one container that mounts the operator's key."""
SIGNER_PROGRAM = "/opt/society/src/ledger/signer_process.py"
"""The signer as a script (the controller image's layout, its Dockerfile's):
it loads the standard library and ``cryptography``, not the ``ledger`` package."""
SIGNER_DIR = "/var/run/society/signer"
SIGNER_SOCKET = f"{SIGNER_DIR}/signer.sock"
"""Where the signer listens, on a volume it shares with the controller's container only."""
RESULT_PATH = "/dev/termination-log"
"""The controller writes its ``RunResult`` here; the kubelet hands it back as the container's
termination message (at most 4096 bytes), which the run worker reads."""


def runspec_configmap(run_id: str, module_name: str, source: bytes) -> Obj:
    """The RunSpec module the in-cluster controller loads, immutable."""
    return manifest(
        "ConfigMap",
        run_metadata(run_id, RUNSPEC_CONFIGMAP, **{ROLE_LABEL: "controller"}),
        immutable=True,
        data={module_name: source.decode("utf-8")},
    )


def controller_job(
    run_id: str,
    *,
    image: str,
    module_name: str,
    seed: int | None,
    profile: str,
    cluster_queue: str,
    active_deadline_s: int,
    ledger_claim: str | None = None,
    environment: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    signing_key_secret: str | None = None,
) -> Obj:
    """The controller, in-cluster: one pod, never retried (a run executes at most once).

    The ledger goes to ``ledger_claim`` (a PersistentVolumeClaim in the run's namespace) when
    given, else to an ``emptyDir``; the result goes to the termination message
    (``RESULT_PATH``). ``environment`` adds settings (timeouts, credentials namespace).
    """
    labels = {**MANAGED_BY, "society.run/id": run_id, ROLE_LABEL: "controller"}
    env = [
        {"name": s.RUN_ID.name, "value": run_id},
        {"name": s.RUN_MODULE.name, "value": f"{RUNSPEC_DIR}/{module_name}"},
        *([{"name": s.RUN_SEED.name, "value": str(seed)}] if seed is not None else []),
        {"name": s.PROFILE.name, "value": profile},
        {"name": s.KUBE_IN_CLUSTER.name, "value": "1"},
        {"name": s.CLUSTER_QUEUE.name, "value": cluster_queue},
        {"name": s.ARTIFACTS.name, "value": ARTIFACT_ROOT},
        {"name": s.RESULT_PATH.name, "value": RESULT_PATH},
        *({"name": k, "value": v} for k, v in sorted((environment or {}).items())),
        *([{"name": SIGNER_SOCKET_VARIABLE, "value": SIGNER_SOCKET}] if signing_key_secret else []),
    ]
    signing_volumes = (
        [
            {"name": "signing-key",
             "secret": {"secretName": signing_key_secret, "defaultMode": 0o440}},
            {"name": "signer", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ]
        if signing_key_secret
        else []
    )  # fmt: skip
    signer_mount = {"name": "signer", "mountPath": SIGNER_DIR}
    signers = [signer_container(run_id, image, signer_mount)] if signing_key_secret else []
    artifacts: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": ledger_claim}} if ledger_claim else {"emptyDir": {}}
    )
    return manifest(
        "Job",
        run_metadata(run_id, CONTROLLER_JOB, **{ROLE_LABEL: "controller"}),
        spec={
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_deadline_s,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": CONTROLLER_ACCOUNT,
                    "automountServiceAccountToken": True,
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    # the ledger volume is writable by the controller
                    "securityContext": restricted_pod(group=False),
                    # a native sidecar: up before the controller, ended after it
                    **({"initContainers": signers} if signers else {}),
                    "containers": [
                        {
                            "name": "controller",
                            "image": image,
                            "command": ["python", "-m", "controller.incluster.main"],
                            "env": env,
                            "terminationMessagePath": RESULT_PATH,
                            "terminationMessagePolicy": "File",
                            "securityContext": restricted_container(read_only_root=False),
                            "volumeMounts": [
                                {"name": "runspec", "mountPath": RUNSPEC_DIR, "readOnly": True},
                                {"name": "artifacts", "mountPath": ARTIFACT_ROOT},
                                *([signer_mount] if signers else []),
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "runspec", "configMap": {"name": RUNSPEC_CONFIGMAP}},
                        {"name": "artifacts", **artifacts},
                        *signing_volumes,
                    ],
                },
            },
        },
    )


def signer_container(run_id: str, image: str, socket_mount: Mapping[str, Any]) -> Obj:
    """The controller Job's signer (``ledger/signer_process.py --listen``), a native sidecar: it
    alone mounts the operator's key, and signs only this run's statements for whoever connects
    to its socket. The controller's container, where the researcher's module runs, never sees
    the key's file (docs/security.md, "What a ledger proves")."""
    return {
        "name": SIGNER_CONTAINER,
        "image": image,
        "restartPolicy": "Always",
        "command": [
            "python3",
            SIGNER_PROGRAM,
            "--listen",
            SIGNER_SOCKET,
            run_id,
            f"{SIGNING_DIR}/{SIGNING_KEY_FILE}",
        ],
        "securityContext": restricted_container(),
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [
            {"name": "signing-key", "mountPath": SIGNING_DIR, "readOnly": True},
            dict(socket_mount),
        ],
    }


def ledger_claim(run_id: str, name: str, *, storage_class: str | None, size: str) -> Obj:
    """The controller's ledger volume. Not owned by the run's owner: use a StorageClass with
    ``reclaimPolicy: Retain`` so the volume outlives the namespace."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    metadata = run_metadata(run_id, name, **{ROLE_LABEL: "ledger"})
    return manifest("PersistentVolumeClaim", metadata, spec=spec)


# ---- the run worker (system namespace) ------------------------------------------------------


def worker_deployment(
    *,
    image: str,
    temporal_address: str,
    replicas: int = 1,
    task_queue: str = "society-runs",
    credentials_namespace: str = "society-credentials",
) -> Obj:
    """The Temporal worker that runs ``SocietyRun`` workflows: prepare, execute, cleanup."""
    labels = {**MANAGED_BY, "app.kubernetes.io/name": "society-run-worker"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "society-run-worker", "namespace": SYSTEM_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "society-run-worker"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": WORKER_ACCOUNT,
                    "securityContext": restricted_pod(group=False, fs_group=False),
                    "containers": [
                        {
                            "name": "worker",
                            "image": image,
                            "command": [
                                "python",
                                "-m",
                                "controller.lifecycle.worker",
                                "--task-queue",
                                task_queue,
                            ],
                            "env": [
                                {"name": "TEMPORAL_ADDRESS", "value": temporal_address},
                                {"name": s.KUBE_IN_CLUSTER.name, "value": "1"},
                                {
                                    "name": s.CREDENTIALS_NAMESPACE.name,
                                    "value": credentials_namespace,
                                },
                            ],
                            "securityContext": restricted_container(read_only_root=False),
                        }
                    ],
                },
            },
        },
    }


def signing_key_secret(run_id: str, pem: bytes) -> Obj:
    """The operator's key for this run's controller Job, immutable; it goes with the namespace."""
    return run_secret(run_id, SIGNING_SECRET, {SIGNING_KEY_FILE: pem}, **{ROLE_LABEL: "controller"})
