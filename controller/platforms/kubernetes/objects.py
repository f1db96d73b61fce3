"""The run's Kubernetes objects, built as plain manifests from the roster's runtime descriptors.

Everything lives in the run's namespace (the run id names it), carries the run's labels and is
owned by one ConfigMap, ``society-run``: deleting the namespace or that owner is the whole
cleanup. Secret values go only into Secrets' ``data``, never into a spec or the ledger.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.agents.runtime import Resources, RuntimeDescriptor
from controller.platforms.kubernetes.kube import KINDS, Obj
from controller.run.platform import PlatformError

MANAGED_BY = {"app.kubernetes.io/managed-by": "society-runner"}
RUN_LABEL = "society.run/id"
AGENT_LABEL = "society.run/agent"
ROLE_LABEL = "society.run/role"

OWNER = "society-run"
"""The ConfigMap every run object is owned by."""
LOCAL_QUEUE = "roster"
WORKLOAD = "roster"
ROUTER_SERVICE = "society-router"
ROUTER_CA_SECRET = "router-ca"
CONTROLLER_ACCOUNT = "society-controller"

AGENT_CONTAINER = "agent"
KEEPER_CONTAINER = "keeper"
"""Shares the working directory and outlives the agent's program, so that harvest can read the
declared files through the exec API after the program exited (a container that has ended
cannot be exec'd into). It runs the agent's own image, idle, and dies with the pod."""
KEEPER_COMMAND = (
    "python",
    "-c",
    "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); signal.pause()",
)
"""Idle until SIGTERM, then exit: it is its container's PID 1, to which the kernel delivers no
signal without a handler, so without one every pod waited out its whole grace period (30 s)
before it was deleted."""
KEEPER_RESOURCES = Resources(cpu=0.001, memory_mib=16, memory_limit_mib=48)
WORKDIR = "/home/agent/work"
SECRETS_DIR = "/var/run/society/secrets"
SECRETS_KEY = "secrets.json"
"""The ``secrets`` volume holds this one key of the agent's Secret; the ``files`` volume the
rest, each mounted into the working directory by ``subPath``."""
SECRETS_FILE = f"{SECRETS_DIR}/{SECRETS_KEY}"
CA_DIR = "/var/run/society/router-ca"
CA_FILE = f"{CA_DIR}/ca.pem"
TMP_DIR = "/tmp"
NON_ROOT_ID = 65532


def restricted_container(*, read_only_root: bool = True) -> dict[str, Any]:
    """A container's ``securityContext`` under the restricted Pod Security Standard: no
    privilege escalation, no capabilities, and (unless the program writes its image's files) a
    read-only root filesystem."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if read_only_root:
        context["readOnlyRootFilesystem"] = True
    return context


def restricted_pod(*, group: bool = True, fs_group: bool = True) -> dict[str, Any]:
    """A pod's ``securityContext`` under the restricted standard: the runtime's default seccomp
    profile and the numeric non-root user; ``group`` also as its group, ``fs_group`` owning its
    volumes (a ledger volume the controller writes, a 0440 Secret it reads)."""
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": NON_ROOT_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if group:
        context["runAsGroup"] = NON_ROOT_ID
    if fs_group:
        context["fsGroup"] = NON_ROOT_ID
    return context


WORK_SIZE = "256Mi"
"""The working directory's ``emptyDir`` sizeLimit (the kubelet evicts a pod that exceeds it)."""
TMP_SIZE = "64Mi"
EPHEMERAL_LIMIT = "512Mi"
"""Each container's ephemeral-storage limit (logs and writable layers; the root is read-only)."""
CPU_LIMIT_CORES = 1.0
"""Each agent container's CPU limit, or its request when that is larger."""
MAX_POD_SETS = 8
"""Kueue's limit on pod sets per Workload."""


def run_labels(run_id: str, **extra: str) -> dict[str, str]:
    return {**MANAGED_BY, RUN_LABEL: run_id, **extra}


def run_selector(run_id: str) -> str:
    return f"{RUN_LABEL}={run_id}"


def run_metadata(run_id: str, name: str, **labels: str) -> dict[str, Any]:
    """An object's metadata in the run's namespace, with the run's labels and ``labels``."""
    return {"name": name, "namespace": run_id, "labels": run_labels(run_id, **labels)}


def manifest(kind: str, metadata: dict[str, Any], **body: Any) -> Obj:
    """A ``kind`` object (its apiVersion from ``KINDS``) with ``metadata`` and ``body``."""
    return {"apiVersion": KINDS[kind].api_version, "kind": kind, "metadata": metadata, **body}


def namespace(run_id: str) -> Obj:
    labels = {
        **run_labels(run_id),
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return manifest("Namespace", {"name": run_id, "labels": labels})


def owner(run_id: str) -> Obj:
    """The one object every run object is owned by."""
    return manifest(
        "ConfigMap", run_metadata(run_id, OWNER, **{ROLE_LABEL: "owner"}), data={"runId": run_id}
    )


def owned(obj: Obj, owner_obj: Obj) -> Obj:
    """``obj`` with an ownerReference to ``owner_obj`` (same namespace), so GC deletes it."""
    reference = {
        "apiVersion": owner_obj["apiVersion"],
        "kind": owner_obj["kind"],
        "name": owner_obj["metadata"]["name"],
        "uid": owner_obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [reference]}}


# ---- admission -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodSet:
    """Roster agents with identical requests: one Kueue pod set."""

    name: str
    resources: Resources
    image: str
    agents: tuple[str, ...]


def pod_sets(roster: Mapping[str, RuntimeDescriptor]) -> list[PodSet]:
    """Group the roster by identical requests; raises ``PlatformError`` beyond Kueue's limit."""
    groups: dict[tuple[float, int], list[str]] = {}
    for name, descriptor in roster.items():
        key = (descriptor.resources.cpu, descriptor.resources.memory_mib)
        groups.setdefault(key, []).append(name)
    if len(groups) > MAX_POD_SETS:
        raise PlatformError(
            f"the roster has {len(groups)} distinct resource shapes (cpu, memory requests) and "
            f"one Kueue Workload holds at most {MAX_POD_SETS}; give agents fewer distinct "
            f"requests",
            reason="too-many-shapes",
        )
    return [
        PodSet(
            f"shape-{index}", roster[agents[0]].resources, roster[agents[0]].image, tuple(agents)
        )
        for index, agents in enumerate(groups.values())
    ]


def local_queue(run_id: str, cluster_queue: str) -> Obj:
    return manifest(
        "LocalQueue", run_metadata(run_id, LOCAL_QUEUE), spec={"clusterQueue": cluster_queue}
    )


def workload(run_id: str, sets: Sequence[PodSet]) -> Obj:
    """One Workload for the complete roster: admitted whole or not at all."""
    return manifest(
        "Workload",
        run_metadata(run_id, WORKLOAD),
        spec={
            "queueName": LOCAL_QUEUE,
            "podSets": [
                {
                    "name": pod_set.name,
                    "count": len(pod_set.agents),
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": AGENT_CONTAINER,
                                    "image": pod_set.image,
                                    "resources": _quota(pod_set.resources),
                                },
                                {
                                    "name": KEEPER_CONTAINER,
                                    "image": pod_set.image,
                                    "resources": _quota(KEEPER_RESOURCES),
                                },
                            ],
                        }
                    },
                }
                for pod_set in sets
            ],
        },
    )


def _quota(resources: Resources) -> dict[str, Any]:
    """What Kueue counts against the queue's quota: requests (and the memory limit); the pods'
    ephemeral-storage limits would count as requests of a resource queues do not cover."""
    return {
        "requests": {"cpu": _cpu(resources.cpu), "memory": f"{resources.memory_mib}Mi"},
        "limits": {"memory": f"{resources.memory_limit_mib}Mi"},
    }


def _resources(resources: Resources) -> dict[str, Any]:
    return {
        "requests": {"cpu": _cpu(resources.cpu), "memory": f"{resources.memory_mib}Mi"},
        "limits": {
            "cpu": _cpu(max(resources.cpu, CPU_LIMIT_CORES)),
            "memory": f"{resources.memory_limit_mib}Mi",
            "ephemeral-storage": EPHEMERAL_LIMIT,
        },
    }


def _cpu(cores: float) -> str:
    return f"{round(cores * 1000)}m"


# ---- agents --------------------------------------------------------------------------------


def agent_secrets_name(agent: str) -> str:
    return f"agent-{agent}-secrets"


def run_secret(run_id: str, name: str, data: Mapping[str, bytes], **labels: str) -> Obj:
    return manifest(
        "Secret",
        run_metadata(run_id, name, **labels),
        type="Opaque",
        immutable=True,
        data={key: base64.b64encode(value).decode("ascii") for key, value in data.items()},
    )


def agent_secrets(
    run_id: str, agent: str, secrets_json: bytes, files: Mapping[str, bytes] | None = None
) -> Obj:
    """The agent's one Secret, immutable: its boot secrets file (router token, bridge token,
    credentials) and the runtime's declared ``files``, each mounted where it belongs
    (``sandbox``). One Secret rather than two: a 1,000-agent roster's start is 1,000 requests
    and objects fewer."""
    keys = file_keys(files or {})
    data = {SECRETS_KEY: secrets_json, **{keys[path]: c for path, c in (files or {}).items()}}
    labels = {AGENT_LABEL: agent, ROLE_LABEL: "agent"}
    return run_secret(run_id, agent_secrets_name(agent), data, **labels)


def file_keys(files: Mapping[str, bytes]) -> dict[str, str]:
    """Relative path -> the Secret key that holds it (paths are not valid keys)."""
    return {path: f"file-{index}" for index, path in enumerate(sorted(files))}


def router_ca(run_id: str, ca_pem: bytes) -> Obj:
    return run_secret(run_id, ROUTER_CA_SECRET, {"ca.pem": ca_pem}, **{ROLE_LABEL: "router"})


def sandbox(
    run_id: str,
    agent: str,
    descriptor: RuntimeDescriptor,
    *,
    router_url: str,
    seed: int,
    shutdown_at: datetime.datetime,
    non_root: bool = True,
    placement: Mapping[str, Any] | None = None,
    host_aliases: Sequence[Mapping[str, Any]] = (),
) -> Obj:
    """One Agent Sandbox for ``agent``: its pinned image, command, boot variables, Secrets;
    ``placement`` (nodeSelector, tolerations) puts its pod on the agents' nodes."""
    keys = file_keys(descriptor.files)
    secret_mounts: list[dict[str, Any]] = [
        {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
        {"name": "router-ca", "mountPath": CA_DIR, "readOnly": True},
        *(
            {"name": "files", "mountPath": f"{WORKDIR}/{path}", "subPath": key, "readOnly": True}
            for path, key in keys.items()
        ),
    ]
    secret_volumes: list[dict[str, Any]] = [
        {
            "name": "secrets",
            "secret": {
                "secretName": agent_secrets_name(agent),
                "defaultMode": 0o440,
                "items": [{"key": SECRETS_KEY, "path": SECRETS_KEY}],
            },
        },
        {"name": "router-ca", "secret": {"secretName": ROUTER_CA_SECRET, "defaultMode": 0o444}},
    ]
    if keys:
        secret_volumes.append(
            {
                "name": "files",
                "secret": {
                    "secretName": agent_secrets_name(agent),
                    "defaultMode": 0o444,
                    "items": [{"key": key, "path": key} for key in keys.values()],
                },
            }
        )
    pod = agent_pod(
        descriptor,
        labels=run_labels(run_id, **{AGENT_LABEL: agent, ROLE_LABEL: "agent"}),
        environment=agent_environment(
            agent,
            descriptor,
            router_url=router_url,
            seed=seed,
            files={SECRETS_FILE: SECRETS_FILE, CA_FILE: CA_FILE},
        ),
        command=descriptor.command,
        secret_mounts=secret_mounts,
        secret_volumes=secret_volumes,
        non_root=non_root,
        placement=placement,
        host_aliases=host_aliases,
    )
    return manifest(
        "Sandbox",
        run_metadata(run_id, agent, **{AGENT_LABEL: agent, ROLE_LABEL: "agent"}),
        spec={
            "podTemplate": pod,
            "service": True,
            "shutdownTime": shutdown_at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "shutdownPolicy": "Delete",
        },
    )


def agent_environment(
    agent: str,
    descriptor: RuntimeDescriptor,
    *,
    router_url: str,
    seed: int,
    files: Mapping[str, str] | None = None,
    router_address: str | None = None,
) -> dict[str, str]:
    """The agent's boot variables and its runtime's own; ``files`` maps the secrets file's and
    the router CA's paths (``SECRETS_FILE``, ``CA_FILE``) to where this sandbox has them (a warm
    sandbox writes them itself); ``router_address`` is where to dial the router when no name
    resolves in the pod."""
    from society_sandbox import boot

    where = files or {}
    environment = {
        boot.AGENT_NAME: agent,
        boot.ROUTER_URL: router_url,
        **({boot.ROUTER_CA_FILE: where[CA_FILE]} if CA_FILE in where else {}),
        **({boot.ROUTER_ADDRESS: router_address} if router_address else {}),
        boot.BRIDGE_PORT: str(descriptor.bridge_port),
        **({boot.SECRETS_FILE: where[SECRETS_FILE]} if SECRETS_FILE in where else {}),
        boot.RUN_SEED: str(seed),
    }
    return {**environment, **dict(sorted(descriptor.environment.items()))}


def agent_pod(
    descriptor: RuntimeDescriptor,
    *,
    labels: Mapping[str, str],
    environment: Mapping[str, str],
    command: Sequence[str],
    secret_mounts: Sequence[Mapping[str, Any]] = (),
    secret_volumes: Sequence[Mapping[str, Any]] = (),
    non_root: bool = True,
    placement: Mapping[str, Any] | None = None,
    host_aliases: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """An agent's pod template: the runtime's container running ``command`` beside the keeper,
    the working directory and ``/tmp`` as emptyDirs, ``secret_mounts`` of ``secret_volumes`` into
    the agent's container only."""
    mounts: list[dict[str, Any]] = [
        {"name": "work", "mountPath": WORKDIR},
        {"name": "tmp", "mountPath": TMP_DIR},
        *(dict(mount) for mount in secret_mounts),
    ]
    workspace = [
        {**mount, "readOnly": True} for mount in mounts if mount["mountPath"].startswith(WORKDIR)
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "work", "emptyDir": {"sizeLimit": WORK_SIZE}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
        *(dict(volume) for volume in secret_volumes),
    ]
    pod_security = restricted_pod() if non_root else {"seccompProfile": {"type": "RuntimeDefault"}}
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            **({"hostAliases": [dict(a) for a in host_aliases]} if host_aliases else {}),
            "securityContext": pod_security,
            "containers": [
                {
                    "name": AGENT_CONTAINER,
                    "image": descriptor.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(command),
                    "workingDir": WORKDIR,
                    "env": [{"name": k, "value": v} for k, v in environment.items()],
                    "ports": [{"name": "bridge", "containerPort": descriptor.bridge_port}],
                    "resources": _resources(descriptor.resources),
                    # writable: work, tmp (emptyDirs)
                    "securityContext": restricted_container(),
                    "volumeMounts": mounts,
                },
                {
                    "name": KEEPER_CONTAINER,
                    "image": descriptor.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(KEEPER_COMMAND),
                    "workingDir": WORKDIR,
                    "resources": _resources(KEEPER_RESOURCES),
                    "securityContext": restricted_container(),
                    "volumeMounts": workspace,  # what the program sees there, not its secrets
                },
            ],
            "volumes": volumes,
            **(placement or {}),
        },
    }
