"""Who may do what on a cluster: the run worker's and the controller's roles and bindings.

RBAC cannot scope a rule by label or by who created a namespace, so the worker's rights come in
three parts (docs/kubernetes.md, "RBAC"):

* cluster-wide (``WORKER_RULES``): create namespaces, read them, create RoleBindings, and
  ``get`` and ``bind`` only the two ClusterRoles below. No Secrets, Jobs, Pods or exec.
  In a run namespace it may create and delete Secrets (the controller's signing key, the
  export Job's token) but never read one.
* per run (``RUN_NAMESPACE_RULES``, the ClusterRole ``society-run-namespace``): what prepare,
  execute and cleanup do, granted in each run namespace by a RoleBinding that the worker makes
  to itself right after creating the namespace; deleting the namespace is one of those rights,
  so the worker can delete only namespaces it bound itself in.
* the admission policies (the chart's ``rbac.yaml``): the worker may create only namespaces named
  and labelled as runs, and RoleBindings only in the run namespaces it created (itself to
  ``society-run-namespace``, the run's controller to ``society-run-controller``) and in the
  credentials namespace (a run's controller to the credentials reader).

The controller's rights (``CONTROLLER_RULES``) are the ClusterRole ``society-run-controller``,
bound per run in its namespace; the worker holds none of them (``bind`` is enough to grant them).
The Helm chart installs the cluster-scoped parts (``templates/rbac.yaml``; a test checks the chart
against these constants, ``tests/kubernetes/worker_rights.py``).
"""

from __future__ import annotations

from typing import Any

from controller.platforms.kubernetes.api import SANDBOX_EXTENSIONS
from controller.platforms.kubernetes.kube import KUEUE, SANDBOX_GROUP, Obj
from controller.platforms.kubernetes.objects import (
    CONTROLLER_ACCOUNT,
    MANAGED_BY,
    OWNER,
    ROLE_LABEL,
    RUN_LABEL,
    manifest,
    run_metadata,
)

RBAC = "rbac.authorization.k8s.io"
RUNSPEC_CONFIGMAP = "society-runspec"
SYSTEM_NAMESPACE = "society-system"
WORKER_ACCOUNT = "society-run-worker"
WORKER_CLUSTER_ROLE = "society-run-worker"
RUN_NAMESPACE_ROLE = "society-run-namespace"
"""The ClusterRole the worker binds itself to in each run namespace it created."""
CONTROLLER_ROLE = "society-run-controller"
"""The ClusterRole a run's controller is bound to in its namespace."""
WORKER_BINDING = "society-run-worker"
"""The worker's RoleBinding in a run namespace (and in the credentials namespace)."""
CREATED_BY = "society.run/created-by"
"""The annotation naming who created a run namespace (set at creation, never changed)."""
CREDENTIALS_READER = "society-credentials-reader"
"""The Role, in the credentials namespace, that lets a run's controller read Secrets by name."""
WARM_CLAIMER = "society-warm-claimer"
"""The Role, in the warm namespace (``warm.WARM_NAMESPACE``), that lets a run's controller claim
warm sandboxes for its agents and reach their pods."""


def _rule(group: str, resources: list[str], verbs: list[str], **extra: Any) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs, **extra}


CONTROLLER_RULES: list[dict[str, Any]] = [
    _rule("", ["configmaps"], ["get"], resourceNames=[OWNER, RUNSPEC_CONFIGMAP]),
    _rule("", ["secrets"], ["create", "patch", "delete"]),
    _rule("", ["services"], ["get", "create", "patch", "delete"]),
    # the debugging mode's selector-less router Service: its one endpoint, this controller
    _rule("discovery.k8s.io", ["endpointslices"], ["get", "create", "patch"]),
    _rule("", ["pods"], ["get", "list", "watch"]),
    _rule("", ["pods/log"], ["get"]),
    _rule("", ["pods/exec"], ["get", "create"]),  # harvest reads files in the keeper container
    _rule("networking.k8s.io", ["networkpolicies"], ["get", "create", "patch"]),
    _rule(KUEUE, ["localqueues"], ["get", "create", "patch"]),
    _rule(KUEUE, ["workloads"], ["get", "list", "watch", "create", "patch", "delete"]),
    _rule(SANDBOX_GROUP, ["sandboxes"], ["get", "list", "watch", "create", "patch", "delete"]),
]
"""Exactly what ``KubernetesSession`` does in its namespace, and nothing else."""

WORKER_RULES: list[dict[str, Any]] = [
    _rule("", ["namespaces"], ["get", "list", "watch", "create"]),
    # only in run namespaces and the credentials namespace: the admission policy checks where
    _rule(RBAC, ["rolebindings"], ["create"]),
    _rule(
        RBAC, ["clusterroles"], ["get", "bind"], resourceNames=[RUN_NAMESPACE_ROLE, CONTROLLER_ROLE]
    ),
]
"""The run worker's cluster-wide rights."""

RUN_NAMESPACE_RULES: list[dict[str, Any]] = [
    _rule("", ["namespaces"], ["get", "delete"]),  # bound in a namespace: that namespace only
    _rule("", ["configmaps"], ["get", "create", "patch"]),  # the owner, the RunSpec module
    _rule("", ["serviceaccounts"], ["get", "create", "patch"]),  # the controller's identity
    _rule(RBAC, ["rolebindings"], ["get", "patch"]),
    # execute runs the controller as a Job; deleting it (foreground) relays cancellation
    _rule("batch", ["jobs"], ["get", "list", "watch", "create", "patch", "delete"]),
    _rule("", ["pods"], ["get", "list", "watch"]),  # the controller Job's pod
    _rule("", ["persistentvolumeclaims"], ["get", "create", "patch"]),  # the ledger volume
    # the controller's signing key and the export Job's token: written, never read (no get)
    _rule("", ["secrets"], ["create", "delete"]),
    _rule("networking.k8s.io", ["networkpolicies"], ["create"]),  # the export Job's egress
]
"""What the run worker does inside a run namespace it created (prepare, execute, cleanup)."""

WORKER_CREDENTIALS_RULES: list[dict[str, Any]] = [
    _rule(RBAC, ["rolebindings"], ["get", "patch", "delete"]),
    _rule(RBAC, ["roles"], ["bind"], resourceNames=[CREDENTIALS_READER]),
]
"""In the credentials namespace: bind a run's controller to the reader, and unbind it."""

WARM_CLAIMER_RULES: list[dict[str, Any]] = [
    _rule(SANDBOX_EXTENSIONS, ["sandboxwarmpools"], ["get", "list"]),
    _rule(SANDBOX_EXTENSIONS, ["sandboxclaims"], ["get", "list", "watch", "create", "delete"]),
    _rule("", ["pods"], ["get", "list", "watch"]),
    _rule("", ["pods/log"], ["get"]),
    _rule("", ["pods/exec"], ["get", "create"]),  # harvest, as in the run's namespace
    _rule("networking.k8s.io", ["networkpolicies"], ["get", "create", "patch", "delete"]),
]
"""Exactly what ``KubernetesSession`` does in the warm namespace: read the pools, claim, watch
and harvest the claimed pods, and its run's one network policy there."""

WORKER_WARM_RULES: list[dict[str, Any]] = [
    _rule(RBAC, ["rolebindings"], ["get", "patch", "delete"]),
    _rule(RBAC, ["roles"], ["bind"], resourceNames=[WARM_CLAIMER]),
    # cleanup: the claims and policy of a run whose controller did not release them
    _rule(SANDBOX_EXTENSIONS, ["sandboxclaims"], ["list", "delete"]),
    _rule("networking.k8s.io", ["networkpolicies"], ["delete"]),
]
"""In the warm namespace: bind a run's controller to the claimer, unbind it, and release what
the run left there."""


def _cluster_object(kind: str, name: str, **body: Any) -> Obj:
    metadata = {"name": name, "labels": dict(MANAGED_BY)}
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": metadata, **body}


def _namespaced(kind: str, name: str, namespace: str, **body: Any) -> Obj:
    metadata = {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)}
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": metadata, **body}


def _role_ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": RBAC, "kind": kind, "name": name}


def account_subject(name: str, namespace: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def worker_subject(namespace: str = SYSTEM_NAMESPACE) -> str:
    """The run worker's user name, as the API server sees it (and as tests impersonate it)."""
    return f"system:serviceaccount:{namespace}:{WORKER_ACCOUNT}"


def controller_subject(run_id: str) -> str:
    """The controller's user name, as the API server sees it (and as tests impersonate it)."""
    return f"system:serviceaccount:{run_id}:{CONTROLLER_ACCOUNT}"


def subject_of(username: str) -> dict[str, str]:
    """A RoleBinding subject for an authenticated user name (a ServiceAccount's, or a user's)."""
    parts = username.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return account_subject(parts[3], parts[2])
    return {"apiGroup": RBAC, "kind": "User", "name": username}


# ---- installed once (the Helm chart) ---------------------------------------------------------


def run_cluster_roles() -> list[Obj]:
    """The two ClusterRoles a run's RoleBindings refer to."""
    return [
        _cluster_object("ClusterRole", RUN_NAMESPACE_ROLE, rules=RUN_NAMESPACE_RULES),
        _cluster_object("ClusterRole", CONTROLLER_ROLE, rules=CONTROLLER_RULES),
    ]


def credentials_reader_role(namespace: str) -> Obj:
    """In the credentials namespace: get Secrets by name, no list."""
    return _namespaced(
        "Role", CREDENTIALS_READER, namespace, rules=[_rule("", ["secrets"], ["get"])]
    )


def warm_claimer_role(namespace: str) -> Obj:
    return _namespaced("Role", WARM_CLAIMER, namespace, rules=WARM_CLAIMER_RULES)


# ---- per run ---------------------------------------------------------------------------------


def worker_binding(run_id: str, username: str) -> Obj:
    """In a run namespace: ``username`` (the worker, whoever prepares) gets the run's rights."""
    return manifest(
        "RoleBinding",
        run_metadata(run_id, WORKER_BINDING),
        roleRef=_role_ref("ClusterRole", RUN_NAMESPACE_ROLE),
        subjects=[subject_of(username)],
    )


def controller_account(run_id: str) -> Obj:
    return manifest(
        "ServiceAccount",
        run_metadata(run_id, CONTROLLER_ACCOUNT, **{ROLE_LABEL: "controller"}),
        automountServiceAccountToken=False,  # only the controller's Job mounts it
    )


def controller_binding(run_id: str) -> Obj:
    return manifest(
        "RoleBinding",
        run_metadata(run_id, CONTROLLER_ACCOUNT, **{ROLE_LABEL: "controller"}),
        roleRef=_role_ref("ClusterRole", CONTROLLER_ROLE),
        subjects=[account_subject(CONTROLLER_ACCOUNT, run_id)],
    )


def credentials_binding_name(run_id: str) -> str:
    return f"{CREDENTIALS_READER}-{run_id}"


def credentials_binding(run_id: str, namespace: str) -> Obj:
    """Per run, in the credentials namespace: the run's controller may read Secrets there.

    It lives outside the run's namespace (an ownerReference cannot cross namespaces), so
    ``delete_run_namespace`` deletes it explicitly.
    """
    binding = _namespaced(
        "RoleBinding",
        credentials_binding_name(run_id),
        namespace,
        roleRef=_role_ref("Role", CREDENTIALS_READER),
        subjects=[account_subject(CONTROLLER_ACCOUNT, run_id)],
    )
    binding["metadata"]["labels"][RUN_LABEL] = run_id
    return binding


def warm_binding_name(run_id: str) -> str:
    return f"{WARM_CLAIMER}-{run_id}"


def warm_binding(run_id: str, namespace: str) -> Obj:
    """Per run, in the warm namespace: the run's controller may claim there. Outside the run's
    namespace, so ``delete_run_namespace`` deletes it explicitly."""
    binding = _namespaced(
        "RoleBinding",
        warm_binding_name(run_id),
        namespace,
        roleRef=_role_ref("Role", WARM_CLAIMER),
        subjects=[account_subject(CONTROLLER_ACCOUNT, run_id)],
    )
    binding["metadata"]["labels"][RUN_LABEL] = run_id
    return binding
