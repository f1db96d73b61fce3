"""Warm pools: agents' pods made before any run, from Agent Sandbox's SandboxWarmPool, claimed
for a roster and told who they are over their bridge port.

A pool serves one runtime shape (image, command, bridge port, resources: ``shape``), lives in
``WARM_NAMESPACE`` and is made by ``society cluster up --warm-pool N`` (or by hand from
``template`` and ``pool``). Its pods run ``WAITER`` in front of the runtime's command:
it holds the bridge port until the claiming controller sends the agent's variables, secrets and
files (``Provision``), then becomes the runtime. Nothing of the agent is in the claim (Agent
Sandbox cold-starts a claim that carries variables or volumes); the claim carries the run's
labels, which Agent Sandbox puts on the pod, and by which the run's network policy in the warm
namespace selects it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from controller.agents.runtime import RuntimeDescriptor
from controller.platforms.kubernetes import objects
from controller.platforms.kubernetes.kube import Obj, condition
from controller.run.platform import PlatformError

WARM_NAMESPACE = "society-warm"
POOL_LABEL = "society.run/warm-pool"
"""On a pool's template and pods: the pool's name (its shape)."""
LABEL_DOMAIN = "society.run"
"""The label domain Agent Sandbox must allow on claims' pods (its ``agent-sandbox-config``
ConfigMap's ``allowed-label-domains``): the run, agent and role labels travel this way."""
WAITER = ("python3", "-m", "agent_images.warm", "--")
CLAIM_TIMEOUT_S = 60.0
"""How long the roster's claims may take to bind, all of them, before they are all let go and the
roster starts cold."""
PROVISION_CONNECT_S = 0.25
"""One provision try's TCP connect limit: a policy not yet in force drops the connection's
packets, and the kernel's first retransmission would come only after a second."""
PROVISION_AGAIN_S = 0.1
"""The pause before the next try (a refused connection fails at once)."""
PROVISION_ANSWER_S = 10.0
"""How long a connected try may take to send the line and read the waiter's answer."""
PROVISION_TIMEOUT_S = 60.0
"""How long a claimed pod may take to take its provision (its port is closed to this controller
until the network policy sees the run's labels on the pod)."""


def shape(descriptor: RuntimeDescriptor) -> dict[str, Any]:
    """What a pool's pods share, so that any of them can become any agent of this shape."""
    resources = descriptor.resources
    return {
        "runtime": descriptor.runtime,
        "image": descriptor.image,
        "command": list(descriptor.command),
        "bridgePort": descriptor.bridge_port,
        "resources": [resources.cpu, resources.memory_mib, resources.memory_limit_mib],
    }


def pool_name(descriptor: RuntimeDescriptor) -> str:
    """The pool of ``descriptor``'s shape: its runtime and a digest of the shape."""
    digest = hashlib.sha256(json.dumps(shape(descriptor), sort_keys=True).encode()).hexdigest()
    return f"{descriptor.runtime}-{digest[:12]}"


def namespace() -> Obj:
    labels = {
        **objects.MANAGED_BY,
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return objects.manifest("Namespace", {"name": WARM_NAMESPACE, "labels": labels})


def default_deny() -> Obj:
    """Nothing reaches an unclaimed pod and it reaches nothing; a run's ``run_policy`` opens its
    own claimed pods to its controller."""
    return objects.manifest(
        "NetworkPolicy",
        {"name": "default-deny", "namespace": WARM_NAMESPACE, "labels": dict(objects.MANAGED_BY)},
        spec={"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    )


def template(descriptor: RuntimeDescriptor, placement: Mapping[str, Any] | None = None) -> Obj:
    """The SandboxTemplate of ``descriptor``'s shape: its pod waits for its provision."""
    from society_sandbox import boot

    name = pool_name(descriptor)
    pod = objects.agent_pod(
        descriptor,
        labels={**objects.MANAGED_BY, POOL_LABEL: name},
        environment={boot.BRIDGE_PORT: str(descriptor.bridge_port)},
        command=(*WAITER, *descriptor.command),
        placement=placement,
    )
    metadata = {"name": name, "namespace": WARM_NAMESPACE, "labels": {**objects.MANAGED_BY}}
    return objects.manifest(
        "SandboxTemplate",
        metadata,
        # the controller dials the pod's address: no Service; the policies are the run's own
        spec={"podTemplate": pod, "service": False, "networkPolicyManagement": "Unmanaged"},
    )


def pool(descriptor: RuntimeDescriptor, replicas: int) -> Obj:
    name = pool_name(descriptor)
    metadata = {"name": name, "namespace": WARM_NAMESPACE, "labels": {**objects.MANAGED_BY}}
    return objects.manifest(
        "SandboxWarmPool",
        metadata,
        spec={"replicas": replicas, "sandboxTemplateRef": {"name": name}},
    )


def pool_manifests(
    descriptor: RuntimeDescriptor, replicas: int, placement: Mapping[str, Any] | None = None
) -> list[Obj]:
    """Everything a pool of ``descriptor``'s shape (its image pinned) needs, in order: the warm
    namespace, its default-deny policy, the template, the pool of ``replicas``."""
    return [
        namespace(),
        default_deny(),
        template(descriptor, placement),
        pool(descriptor, replicas),
    ]


def claim_name(run_id: str, agent: str) -> str:
    """Short (a cold-started claim's Sandbox and Service take its name, at most 63 characters)
    and unique per run and agent."""
    return "c-" + hashlib.sha256(f"{run_id}/{agent}".encode()).hexdigest()[:20]


def pod_labels(run_id: str, agent: str) -> dict[str, str]:
    return {objects.RUN_LABEL: run_id, objects.AGENT_LABEL: agent, objects.ROLE_LABEL: "agent"}


def claim(run_id: str, agent: str, pool_of: str, *, shutdown_at: datetime.datetime) -> Obj:
    """``agent``'s claim on ``pool_of``: the run's labels for the pod, nothing of the agent."""
    metadata = {
        "name": claim_name(run_id, agent),
        "namespace": WARM_NAMESPACE,
        "labels": objects.run_labels(run_id, **{objects.AGENT_LABEL: agent}),
    }
    return objects.manifest(
        "SandboxClaim",
        metadata,
        spec={
            "warmPoolRef": {"name": pool_of},
            "lifecycle": {
                "shutdownTime": shutdown_at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "shutdownPolicy": "Delete",
            },
            "additionalPodMetadata": {"labels": pod_labels(run_id, agent)},
        },
    )


def run_policy_name(run_id: str) -> str:
    return "run-" + hashlib.sha256(run_id.encode()).hexdigest()[:20]


def provision_policy_name(run_id: str) -> str:
    return "provision-" + hashlib.sha256(run_id.encode()).hexdigest()[:20]


def policy_names(run_id: str) -> tuple[str, str]:
    """The run's two policies in the warm namespace."""
    return run_policy_name(run_id), provision_policy_name(run_id)


def provision_policy(
    run_id: str, *, controller: Mapping[str, Any], bridge_ports: Sequence[int]
) -> Obj:
    """While the run claims: its controller (``controller``, a policy peer) may reach the
    pools' pods' bridge ports, so that a claimed pod takes its provision as soon as the claim
    binds; its labels, and so the run's own policy (``run_policy``), reach the network a while
    later. No agent is a controller: agents reach no pool's pod."""
    return objects.manifest(
        "NetworkPolicy",
        {
            "name": provision_policy_name(run_id),
            "namespace": WARM_NAMESPACE,
            "labels": objects.run_labels(run_id),
        },
        spec={
            "podSelector": {"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [dict(controller)],
                    "ports": [{"protocol": "TCP", "port": p} for p in sorted(set(bridge_ports))],
                }
            ],
        },
    )


def run_policy(
    run_id: str,
    *,
    controller: Mapping[str, Any],
    controller_ports: Sequence[int],
    bridge_ports: Sequence[int],
) -> Obj:
    """The run's claimed pods: only its controller (``controller``, a policy peer) reaches their
    bridges, and they reach only it (router, run services)."""

    def ports(numbers: Sequence[int]) -> list[dict[str, Any]]:
        return [{"protocol": "TCP", "port": p} for p in sorted(set(numbers))]

    return objects.manifest(
        "NetworkPolicy",
        {
            "name": run_policy_name(run_id),
            "namespace": WARM_NAMESPACE,
            "labels": objects.run_labels(run_id),
        },
        spec={
            "podSelector": {
                "matchLabels": {objects.RUN_LABEL: run_id, objects.ROLE_LABEL: "agent"}
            },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [dict(controller)], "ports": ports(bridge_ports)}],
            "egress": [{"to": [dict(controller)], "ports": ports(controller_ports)}],
        },
    )


@dataclass(frozen=True, slots=True)
class Claimed:
    """A bound claim: its name, its sandbox, and whether that came from the pool (``warm``) or
    was made for the claim because the pool had none left (Agent Sandbox names such a sandbox
    after the claim)."""

    claim: str
    sandbox: str
    warm: bool


def placeable(roster: Mapping[str, RuntimeDescriptor], pools: Sequence[Obj]) -> dict[str, str]:
    """Agent -> pool, for the agents whose shape has a pool with a ready sandbox for each of
    them (a shape whose pool is short starts cold, all of its agents)."""
    ready = {
        pool_obj["metadata"]["name"]: int((pool_obj.get("status") or {}).get("readyReplicas") or 0)
        for pool_obj in pools
    }
    by_pool: dict[str, list[str]] = {}
    for agent, descriptor in roster.items():
        by_pool.setdefault(pool_name(descriptor), []).append(agent)
    return {
        agent: name
        for name, agents in by_pool.items()
        if ready.get(name, 0) >= len(agents)
        for agent in agents
    }


FAILED_REASONS = frozenset({"InvalidMetadata", "TemplateNotFound", "ReconcilerError"})
"""A claim's Ready reasons that no wait cures."""


def claim_outcome(claim_obj: Obj | None) -> Claimed | str | None:
    """``Claimed`` once ``claim_obj`` holds a Ready sandbox, why it cannot (its Ready condition's
    reason and message) once it says so for good, else ``None``."""
    if claim_obj is None:
        return None
    ready = condition(claim_obj, "Ready") or {}
    sandbox = (claim_obj.get("status") or {}).get("sandbox") or {}
    name = sandbox.get("name")
    if name and ready.get("status") == "True":
        claim_name_ = claim_obj["metadata"]["name"]
        return Claimed(claim_name_, name, warm=name != claim_name_)
    reason = ready.get("reason") or ""
    if ready.get("status") == "False" and reason in FAILED_REASONS:
        return f"{reason}: {ready.get('message') or ''}".strip()
    return None


async def provision(host: str, port: int, line: bytes, *, limit_s: float) -> None:
    """Hand a claimed pod its provision at ``host:port``: retried until its waiter answers (the
    network policy opens the port once it sees the run's labels on the pod); raises
    ``PlatformError`` when it refuses or never answers."""
    last = "no answer"
    with anyio.move_on_after(limit_s):
        while True:
            try:
                with anyio.fail_after(PROVISION_CONNECT_S):
                    stream = await anyio.connect_tcp(host, port)
                async with stream:
                    with anyio.fail_after(PROVISION_ANSWER_S):
                        await stream.send(line)
                        answer = await _read_answer(stream)
            except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                await anyio.sleep(PROVISION_AGAIN_S)
                continue
            if answer.get("ok") is True:
                return
            raise PlatformError(
                f"the warm sandbox at {host}:{port} refused its provision: {answer.get('error')}",
                reason="warm-provision-refused",
            )
    raise PlatformError(
        f"the warm sandbox at {host}:{port} took no provision within {limit_s:g} s ({last})",
        reason="warm-provision-timeout",
    )


async def _read_answer(stream: anyio.abc.ByteStream) -> dict[str, Any]:
    data = b""
    while b"\n" not in data:
        chunk = await stream.receive(4096)
        data += chunk
        if len(data) > 65536:
            break
    try:
        answer = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return {"error": f"not JSON: {data[:80]!r}"}
    return answer if isinstance(answer, dict) else {"error": "not an object"}
