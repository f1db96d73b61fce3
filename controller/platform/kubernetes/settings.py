"""The Kubernetes profiles' settings: which cluster, which ClusterQueue, which timeouts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_CLUSTER_QUEUE = "society-agents"
DEFAULT_CREDENTIALS_NAMESPACE = "society-credentials"


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """Where and how a run uses a cluster; ``from_environment`` reads the ``SOCIETY_*`` variables.

    | variable | field | default |
    |---|---|---|
    | ``SOCIETY_KUBECONFIG`` | ``kubeconfig`` | ``$KUBECONFIG``, then ``~/.kube/config`` |
    | ``SOCIETY_KUBE_CONTEXT`` | ``context`` | the kubeconfig's current context |
    | ``SOCIETY_KUBE_IN_CLUSTER=1`` | ``in_cluster`` | off (the controller Job sets it) |
    | ``SOCIETY_CLUSTER_QUEUE`` | ``cluster_queue`` | ``society-agents`` |
    | ``SOCIETY_ADMISSION_TIMEOUT_S`` | ``admission_timeout_s`` | 3600 |
    | ``SOCIETY_STARTUP_TIMEOUT_S`` | ``startup_timeout_s`` | 600 |
    | ``SOCIETY_RUN_DEADLINE_S`` | ``run_deadline_s`` | 86400 |
    | ``SOCIETY_CREDENTIALS_NAMESPACE`` | ``credentials_namespace`` | ``society-credentials`` |
    | ``SOCIETY_KUBE_WORKER_NAMESPACES=1`` | ``prepare_namespace``/``delete_namespace`` off | off |
    """

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    cluster_queue: str = DEFAULT_CLUSTER_QUEUE
    admission_timeout_s: float = 3600.0
    """How long Kueue may take to admit the complete roster (separate from start-up)."""
    startup_timeout_s: float = 600.0
    """How long one admitted agent's Sandbox may take to have a Ready, running pod."""
    run_deadline_s: float = 86400.0
    """Sandboxes' ``shutdownTime``: a safety net should cleanup never run."""
    prepare_namespace: bool | None = None
    """Create the namespace, owner and controller identity (default: when out of cluster;
    in-cluster the run worker prepared them)."""
    delete_namespace: bool | None = None
    """Delete the namespace when the session ends (default: when out of cluster; in-cluster the
    run worker's cleanup does)."""
    impersonate: str | None = None
    """Act as this user (tests: the controller's ServiceAccount)."""
    credentials_namespace: str = DEFAULT_CREDENTIALS_NAMESPACE
    """Where ``SecretRef(secret=..., key=...)`` Secrets live; the controller reads them by name
    through a per-run RoleBinding that ``prepare_run_namespace`` creates there."""

    @property
    def prepares(self) -> bool:
        return not self.in_cluster if self.prepare_namespace is None else self.prepare_namespace

    @property
    def deletes(self) -> bool:
        return not self.in_cluster if self.delete_namespace is None else self.delete_namespace

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> KubernetesSettings:
        env = os.environ if environ is None else environ
        # The run worker's prepare and cleanup activities own the namespace (set by the worker).
        by_worker = env.get("SOCIETY_KUBE_WORKER_NAMESPACES") == "1"
        return cls(
            kubeconfig=env.get("SOCIETY_KUBECONFIG") or None,
            context=env.get("SOCIETY_KUBE_CONTEXT") or None,
            in_cluster=env.get("SOCIETY_KUBE_IN_CLUSTER") == "1",
            cluster_queue=env.get("SOCIETY_CLUSTER_QUEUE") or DEFAULT_CLUSTER_QUEUE,
            admission_timeout_s=float(env.get("SOCIETY_ADMISSION_TIMEOUT_S") or 3600),
            startup_timeout_s=float(env.get("SOCIETY_STARTUP_TIMEOUT_S") or 600),
            run_deadline_s=float(env.get("SOCIETY_RUN_DEADLINE_S") or 86400),
            prepare_namespace=False if by_worker else None,
            delete_namespace=False if by_worker else None,
            credentials_namespace=env.get("SOCIETY_CREDENTIALS_NAMESPACE")
            or DEFAULT_CREDENTIALS_NAMESPACE,
        )
