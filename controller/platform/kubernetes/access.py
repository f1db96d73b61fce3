"""Who may do what: the controller's namespaced Role, the run worker's ClusterRole, and the
workloads that carry those identities (the controller Job, the run worker Deployment).

The controller can touch only its run's namespace, and there only what a run needs; it reads no
Secret (it writes its agents' and deletes them) and creates no pod itself (Agent Sandbox does).
The run worker creates and deletes run namespaces and what ``prepare`` puts in them; Kubernetes
lets it grant the controller's Role only because it holds the same rules itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.platform.kubernetes.kube import KUEUE, SANDBOX_GROUP, Obj
from controller.platform.kubernetes.objects import (
    CONTROLLER_ACCOUNT,
    MANAGED_BY,
    OWNER,
    ROLE_LABEL,
    _meta,
    _object,
)

RUNSPEC_CONFIGMAP = "society-runspec"
RUNSPEC_DIR = "/etc/society/runspec"
CONTROLLER_JOB = "society-controller"
ARTIFACT_ROOT = "/var/lib/society/artifacts"
RESULT_PATH = "/dev/termination-log"
"""The controller writes its ``RunResult`` here; the kubelet hands it back as the container's
termination message (at most 4096 bytes), which the run worker reads."""
SYSTEM_NAMESPACE = "society-system"
WORKER_ACCOUNT = "society-run-worker"
WORKER_CLUSTER_ROLE = "society-run-worker"
CREDENTIALS_READER = "society-credentials-reader"
"""The Role, in the credentials namespace, that lets a run's controller read Secrets by name."""


def _rule(group: str, resources: list[str], verbs: list[str], **extra: Any) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs, **extra}


CONTROLLER_RULES: list[dict[str, Any]] = [
    _rule("", ["configmaps"], ["get"], resourceNames=[OWNER, RUNSPEC_CONFIGMAP]),
    _rule("", ["secrets"], ["create", "patch", "delete"]),
    _rule("", ["services"], ["get", "create", "patch", "delete"]),
    _rule("", ["pods"], ["get", "list", "watch"]),
    _rule("", ["pods/log"], ["get"]),
    _rule("", ["pods/exec"], ["get", "create"]),  # harvest reads files in the keeper container
    _rule("networking.k8s.io", ["networkpolicies"], ["get", "create", "patch"]),
    _rule(KUEUE, ["localqueues"], ["get", "create", "patch"]),
    _rule(KUEUE, ["workloads"], ["get", "list", "watch", "create", "patch", "delete"]),
    _rule(SANDBOX_GROUP, ["sandboxes"], ["get", "list", "watch", "create", "patch", "delete"]),
]
"""Exactly what ``KubernetesSession`` does in its namespace, and nothing else."""


def controller_subject(run_id: str) -> str:
    """The controller's user name, as the API server sees it (and as tests impersonate it)."""
    return f"system:serviceaccount:{run_id}:{CONTROLLER_ACCOUNT}"


def controller_account(run_id: str) -> Obj:
    return _object(
        "ServiceAccount",
        _meta(run_id, CONTROLLER_ACCOUNT, **{ROLE_LABEL: "controller"}),
        automountServiceAccountToken=False,  # only the controller's Job mounts it
    )


def controller_role(run_id: str) -> Obj:
    return _object(
        "Role",
        _meta(run_id, CONTROLLER_ACCOUNT, **{ROLE_LABEL: "controller"}),
        rules=CONTROLLER_RULES,
    )


def controller_binding(run_id: str) -> Obj:
    return _object(
        "RoleBinding",
        _meta(run_id, CONTROLLER_ACCOUNT, **{ROLE_LABEL: "controller"}),
        roleRef={
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": CONTROLLER_ACCOUNT,
        },
        subjects=[{"kind": "ServiceAccount", "name": CONTROLLER_ACCOUNT, "namespace": run_id}],
    )


def credentials_reader_role(namespace: str) -> Obj:
    """Installed once (Helm chart) in the credentials namespace: get Secrets by name, no list."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": CREDENTIALS_READER,
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
        "rules": [_rule("", ["secrets"], ["get"])],
    }


def credentials_binding_name(run_id: str) -> str:
    return f"{CREDENTIALS_READER}-{run_id}"


def credentials_binding(run_id: str, namespace: str) -> Obj:
    """Per run, in the credentials namespace: the run's controller may read Secrets there.

    It lives outside the run's namespace (an ownerReference cannot cross namespaces), so
    ``delete_run_namespace`` deletes it explicitly.
    """
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": credentials_binding_name(run_id),
            "namespace": namespace,
            "labels": {**MANAGED_BY, "society.run/id": run_id},
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": CREDENTIALS_READER,
        },
        "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_ACCOUNT, "namespace": run_id}],
    }


def runspec_configmap(run_id: str, module_name: str, source: bytes) -> Obj:
    """The RunSpec module the in-cluster controller loads, immutable."""
    return _object(
        "ConfigMap",
        _meta(run_id, RUNSPEC_CONFIGMAP, **{ROLE_LABEL: "controller"}),
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
) -> Obj:
    """The controller, in-cluster: one pod, never retried (a run executes at most once).

    The ledger goes to ``ledger_claim`` (a PersistentVolumeClaim in the run's namespace) when
    given, else to an ``emptyDir``; the result goes to the termination message
    (``RESULT_PATH``). ``environment`` adds settings (timeouts, credentials namespace).
    """
    labels = {**MANAGED_BY, "society.run/id": run_id, ROLE_LABEL: "controller"}
    env = [
        {"name": "SOCIETY_RUN_ID", "value": run_id},
        {"name": "SOCIETY_RUN_MODULE", "value": f"{RUNSPEC_DIR}/{module_name}"},
        *([{"name": "SOCIETY_RUN_SEED", "value": str(seed)}] if seed is not None else []),
        {"name": "SOCIETY_PROFILE", "value": profile},
        {"name": "SOCIETY_KUBE_IN_CLUSTER", "value": "1"},
        {"name": "SOCIETY_CLUSTER_QUEUE", "value": cluster_queue},
        {"name": "SOCIETY_ARTIFACTS", "value": ARTIFACT_ROOT},
        {"name": "SOCIETY_RESULT_PATH", "value": RESULT_PATH},
        *({"name": k, "value": v} for k, v in sorted((environment or {}).items())),
    ]
    artifacts: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": ledger_claim}} if ledger_claim else {"emptyDir": {}}
    )
    return _object(
        "Job",
        _meta(run_id, CONTROLLER_JOB, **{ROLE_LABEL: "controller"}),
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
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "fsGroup": 65532,  # the ledger volume is writable by the controller
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "controller",
                            "image": image,
                            "command": ["python", "-m", "controller.platform.kubernetes.incluster"],
                            "env": env,
                            "terminationMessagePath": RESULT_PATH,
                            "terminationMessagePolicy": "File",
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "runspec", "mountPath": RUNSPEC_DIR, "readOnly": True},
                                {"name": "artifacts", "mountPath": ARTIFACT_ROOT},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "runspec", "configMap": {"name": RUNSPEC_CONFIGMAP}},
                        {"name": "artifacts", **artifacts},
                    ],
                },
            },
        },
    )


def ledger_claim(run_id: str, name: str, *, storage_class: str | None, size: str) -> Obj:
    """The controller's ledger volume. Not owned by the run's owner: use a StorageClass with
    ``reclaimPolicy: Retain`` so the volume outlives the namespace."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    metadata = _meta(run_id, name, **{ROLE_LABEL: "ledger"})
    return _object("PersistentVolumeClaim", metadata, spec=spec)


# ---- the run worker (system namespace) ------------------------------------------------------

WORKER_RULES: list[dict[str, Any]] = [
    _rule("", ["namespaces"], ["get", "list", "watch", "create", "patch", "delete"]),
    _rule("", ["serviceaccounts"], ["get", "create", "patch"]),
    _rule("", ["configmaps"], ["get", "create", "patch"]),
    _rule("rbac.authorization.k8s.io", ["roles"], ["get", "create", "patch"]),
    _rule("rbac.authorization.k8s.io", ["rolebindings"], ["get", "create", "patch", "delete"]),
    # binds the credentials reader per run without holding Secret reads itself
    _rule("rbac.authorization.k8s.io", ["roles"], ["bind"], resourceNames=[CREDENTIALS_READER]),
    # execute runs the controller as a Job; deleting it (foreground) relays cancellation
    _rule("batch", ["jobs"], ["get", "list", "watch", "create", "patch", "delete"]),
    _rule("", ["persistentvolumeclaims"], ["get", "create", "patch"]),  # the ledger volume
    *CONTROLLER_RULES[1:],  # held so that it may grant them (RBAC escalation check)
]


def worker_cluster_role() -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": WORKER_CLUSTER_ROLE, "labels": dict(MANAGED_BY)},
        "rules": WORKER_RULES,
    }


def worker_cluster_binding() -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": WORKER_CLUSTER_ROLE, "labels": dict(MANAGED_BY)},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": WORKER_CLUSTER_ROLE,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": WORKER_ACCOUNT, "namespace": SYSTEM_NAMESPACE}
        ],
    }


def worker_account() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": WORKER_ACCOUNT,
            "namespace": SYSTEM_NAMESPACE,
            "labels": dict(MANAGED_BY),
        },
    }


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
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "worker",
                            "image": image,
                            "command": [
                                "python",
                                "-m",
                                "controller.platform.temporal.worker",
                                "--task-queue",
                                task_queue,
                            ],
                            "env": [
                                {"name": "TEMPORAL_ADDRESS", "value": temporal_address},
                                {"name": "SOCIETY_KUBE_IN_CLUSTER", "value": "1"},
                                {
                                    "name": "SOCIETY_CREDENTIALS_NAMESPACE",
                                    "value": credentials_namespace,
                                },
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }
