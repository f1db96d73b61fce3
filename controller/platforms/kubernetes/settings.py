"""The Kubernetes profiles' settings: which cluster, which ClusterQueue, which timeouts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import controller.settings as s

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
    | ``SOCIETY_KUBE_IMPERSONATE`` | ``impersonate`` | none (act as the kubeconfig's user) |
    | ``SOCIETY_CLUSTER_QUEUE`` | ``cluster_queue`` | ``society-agents`` |
    | ``SOCIETY_ADMISSION_TIMEOUT_S`` | ``admission_timeout_s`` | 3600 |
    | ``SOCIETY_STARTUP_TIMEOUT_S`` | ``startup_timeout_s`` | 600 |
    | ``SOCIETY_RUN_DEADLINE_S`` | ``run_deadline_s`` | 86400 |
    | ``SOCIETY_CREDENTIALS_NAMESPACE`` | ``credentials_namespace`` | ``society-credentials`` |
    | ``SOCIETY_KUBE_WORKER_NAMESPACES=1`` | ``prepare_namespace``/``delete_namespace`` off | off |
    | ``SOCIETY_CONTROLLER_JOB=0`` | ``controller_job`` off: the controller runs here | on |
    | ``SOCIETY_ROUTER_ADDRESS`` | ``router_address`` | none (required with the above) |
    | ``SOCIETY_IMAGE_MAP`` | ``image_map`` | none (a path, or the JSON; see ``images``) |
    | ``SOCIETY_CONTROLLER_IMAGE`` | ``controller_image`` | the map's ``society/controller:dev`` |
    | ``SOCIETY_CONTROLLER_NODE_SELECTOR`` | ``controller_node_selector`` | none (``k=v,k=v``) |
    | ``SOCIETY_LEDGER_PVC`` | ``ledger_claim`` | none: an ``emptyDir`` |
    | ``SOCIETY_LEDGER_STORAGE_CLASS`` | ``ledger_storage_class`` | the cluster's default |
    | ``SOCIETY_LEDGER_SIZE`` | ``ledger_size`` | ``1Gi`` |
    | ``SOCIETY_SIGNING_KEY`` | ``signing_key`` | none (a per-run key) |
    | ``SOCIETY_LEDGER_NODE_ROOT`` | ``ledger_node_root`` | none (no copy home) |
    | ``SOCIETY_LEDGER_HOST_ROOT`` | ``ledger_host_root`` | none (no copy home) |
    | ``SOCIETY_AGENT_NODE_SELECTOR`` | ``agent_node_selector`` | none (``k=v,k=v``) |
    | ``SOCIETY_AGENT_TOLERATIONS`` | ``agent_tolerations`` | none (a JSON list) |
    | ``SOCIETY_WARM_POOLS=0`` | ``warm_pools`` off: every agent starts cold | on |
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
    """Act as this user (like ``kubectl --as``; tests act as the worker's or the controller's
    ServiceAccount)."""
    credentials_namespace: str = DEFAULT_CREDENTIALS_NAMESPACE
    """Where ``SecretRef(secret=..., key=...)`` Secrets live; the controller reads them by name
    through a per-run RoleBinding that ``prepare_run_namespace`` creates there."""

    controller_job: bool | None = None
    """The run worker's ``execute`` runs the controller as a Job in the run's namespace (the
    default, in-cluster and from a laptop alike: agents reach the router at the run's Service,
    which selects that Job's pod); see ``controller_job.py``. Off (``SOCIETY_CONTROLLER_JOB=0``)
    is a debugging mode: the controller runs in the worker's process and the Service points at
    ``router_address``."""
    router_address: str | None = None
    """With the controller out of cluster: the address at which pods reach this machine (on
    kind, the host's address on the kind network); the router listens there, the run's Service
    has it as its only endpoint, the network policies let agents reach it and it reach them."""
    image_map: str | None = None
    """Image name -> digest-pinned image (``images.ImageMap``): a path or the JSON itself."""
    controller_image: str | None = None
    """The controller Job's image, pinned by digest (default: from the image map)."""
    controller_node_selector: dict[str, str] | None = None
    """Where the controller Job's pod may run (e.g. a system node pool), as node labels."""
    ledger_claim: str | None = None
    """The PersistentVolumeClaim (created in the run's namespace) the Job mounts at the artifact
    root; without it the ledger lives on an ``emptyDir`` and goes with the pod."""
    ledger_storage_class: str | None = None
    ledger_size: str = "1Gi"
    signing_key: str | None = None
    """The operator's key file (``SOCIETY_SIGNING_KEY``) on the submitter's machine: out of
    cluster, the controller Job gets it as a per-run Secret and signs the ledger with it."""
    ledger_node_root: str | None = None
    """Where the nodes keep the claim's volumes (kind: ``/var/local-path-provisioner``)..."""
    ledger_host_root: str | None = None
    """... and where this machine sees that directory: with both, the run directory is copied
    home to the artifact root after the run (``ledger_home``)."""
    agent_node_selector: dict[str, str] | None = None
    """Where agents' pods run (GKE: the agents pool's label)."""
    agent_tolerations: list[dict[str, str]] | None = None
    """What agents' pods tolerate (GKE: the agents pool's taint; Terraform hands it over)."""
    warm_pools: bool = True
    """Claim agents' sandboxes from the cluster's warm pools (``warm``) where a pool of their
    shape has room; off, every agent's Sandbox is made for it."""

    @property
    def agent_placement(self) -> dict[str, Any]:
        """The pod-spec fields that place agents' pods: nodeSelector and tolerations."""
        placement: dict[str, Any] = {}
        if self.agent_node_selector:
            placement["nodeSelector"] = dict(self.agent_node_selector)
        if self.agent_tolerations:
            placement["tolerations"] = [dict(t) for t in self.agent_tolerations]
        return placement

    @property
    def runs_controller_job(self) -> bool:
        return True if self.controller_job is None else self.controller_job

    @property
    def prepares(self) -> bool:
        return not self.in_cluster if self.prepare_namespace is None else self.prepare_namespace

    @property
    def deletes(self) -> bool:
        return not self.in_cluster if self.delete_namespace is None else self.delete_namespace

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> KubernetesSettings:
        env = s.current().environ if environ is None else environ
        # The run worker's prepare and cleanup activities own the namespace (set by the worker).
        by_worker = env.get(s.KUBE_WORKER_NAMESPACES.name) == "1"
        return cls(
            kubeconfig=env.get(s.KUBECONFIG.name) or None,
            context=env.get(s.KUBE_CONTEXT.name) or None,
            in_cluster=env.get(s.KUBE_IN_CLUSTER.name) == "1",
            impersonate=env.get(s.KUBE_IMPERSONATE.name) or None,
            cluster_queue=env.get(s.CLUSTER_QUEUE.name) or DEFAULT_CLUSTER_QUEUE,
            admission_timeout_s=float(env.get(s.ADMISSION_TIMEOUT_S.name) or 3600),
            startup_timeout_s=float(env.get(s.STARTUP_TIMEOUT_S.name) or 600),
            run_deadline_s=float(env.get(s.RUN_DEADLINE_S.name) or 86400),
            prepare_namespace=False if by_worker else None,
            delete_namespace=False if by_worker else None,
            credentials_namespace=env.get(s.CREDENTIALS_NAMESPACE.name)
            or DEFAULT_CREDENTIALS_NAMESPACE,
            controller_job={"1": True, "0": False}.get(env.get(s.CONTROLLER_JOB.name, "")),
            warm_pools=env.get(s.WARM_POOLS.name) != "0",
            router_address=env.get(s.ROUTER_ADDRESS.name) or None,
            image_map=env.get(s.IMAGE_MAP.name) or None,
            controller_image=env.get(s.CONTROLLER_IMAGE.name) or None,
            controller_node_selector=_labels(env.get(s.CONTROLLER_NODE_SELECTOR.name) or ""),
            ledger_claim=env.get(s.LEDGER_PVC.name) or None,
            ledger_storage_class=env.get(s.LEDGER_STORAGE_CLASS.name) or None,
            ledger_size=env.get(s.LEDGER_SIZE.name) or "1Gi",
            signing_key=env.get(s.SIGNING_KEY.name) or None,
            ledger_node_root=env.get(s.LEDGER_NODE_ROOT.name) or None,
            ledger_host_root=env.get(s.LEDGER_HOST_ROOT.name) or None,
            agent_node_selector=_labels(env.get(s.AGENT_NODE_SELECTOR.name) or ""),
            agent_tolerations=_tolerations(env.get(s.AGENT_TOLERATIONS.name) or ""),
        )


def _tolerations(text: str) -> list[dict[str, str]] | None:
    """A JSON list of tolerations, ``None`` when empty; ``ValueError`` names the variable."""
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ValueError(
            f"SOCIETY_AGENT_TOLERATIONS must be a JSON list of toleration objects, not {text!r}"
        )
    return [{str(k): str(v) for k, v in item.items()} for item in value]


def _labels(text: str) -> dict[str, str] | None:
    """``k=v,k2=v2`` as a dict; ``None`` when empty."""
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    return {key.strip(): value.strip() for key, value in pairs} or None
