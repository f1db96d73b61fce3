"""A large roster on KWOK nodes, driven through the kubernetes platform's own session, and the
same objects created straight through the API as a baseline. Shared by the 1,000-agent
admission test and benchmarks/k8s_admission_bench.py. Test-only.

KWOK pods run nothing, so nothing here reaches the readiness gate (bridge attach, router
authentication): the platform's part ends when every Sandbox is Ready with its pod Running,
which is what ``KubernetesSession.start`` returns on. The run kernel is not involved; this is
the platform's part of submit -> gate, phase by phase.
"""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from cluster_support import PINNED, settings
from kind_kwok import KwokPlane, NodeCapacity, node_cpu_seconds

from controller.agents import scripted
from controller.agents.runtime import RuntimeDescriptor
from controller.platforms.kubernetes import Kube, KubernetesPlatform, objects, routing
from controller.platforms.kubernetes.kube import Obj
from controller.platforms.kubernetes.namespace import delete_run_namespace
from controller.run.platform import AgentLaunch, RunPlacement
from controller.run.runid import new_run_id

ROUTER_URL = "wss://127.0.0.1:7443"
"""Where agents would dial the router; nothing listens, KWOK pods dial nothing."""
COUNTED = ("Sandbox", "Secret", "Service", "NetworkPolicy", "Pod")
"""The run objects whose creation is timed and counted."""
SCALE_NODE_CAPACITY = NodeCapacity(pods="1100", ephemeral_storage="1200Gi")
"""Each KWOK node's room: 1,000 agents' pods (21 cores, 78 GiB and, from their limits, 1,000 GiB
of ephemeral storage requested) fit two nodes; the kubelet's default is 110 pods a node."""


def scale_queue_quota(agents: int) -> tuple[str, str]:
    """A ClusterQueue's (cpu, memory) quota with room for ``agents`` scripted agents."""
    descriptor = scripted(image=PINNED)
    per_agent_cpu = descriptor.resources.cpu + objects.KEEPER_RESOURCES.cpu
    per_agent_mib = descriptor.resources.memory_mib + objects.KEEPER_RESOURCES.memory_mib
    return f"{round(agents * per_agent_cpu * 1000) + 1000}m", f"{agents * per_agent_mib + 1024}Mi"


def cpu_seconds(plane: KwokPlane) -> dict[str, float]:
    """CPU time (user + system) each kind node (its API server, etcd, controllers, KWOK, Kueue,
    Agent Sandbox and kubelet together) and this process used so far: a machine shared with
    other work slows the wall clock, not these."""
    return node_cpu_seconds(plane.cluster) | {"this process (controller)": time.process_time()}


def cpu_spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def large_roster(agents: int) -> dict[str, RuntimeDescriptor]:
    """``agents`` scripted agents of one shape (one pod set), each with its policy file."""
    return {f"agent-{index:04d}": scripted(image=PINNED) for index in range(agents)}


@dataclass
class ObjectClock:
    """When each object of the run's namespace was first seen, and each pod first Running
    (seconds after ``origin``), from a list-then-watch of its own."""

    origin: float
    created: dict[str, dict[str, float]] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def until_running(self, pods: int) -> float:
        """Until ``pods`` pods were seen Running; when the last of them was."""
        while len(self.running) < pods:
            changed = self._changed
            await changed.wait()
        return max(self.running.values())

    def last(self, kind: str) -> float:
        return max(self.created.get(kind, {}).values(), default=float("nan"))

    def count(self, kind: str) -> int:
        return len(self.created.get(kind, {}))

    def note(self, kind: str, obj: Obj) -> None:
        now = time.monotonic() - self.origin
        name = obj["metadata"]["name"]
        self.created.setdefault(kind, {}).setdefault(name, now)
        if kind == "Pod" and obj.get("status", {}).get("phase") == "Running":
            self.running.setdefault(name, now)
        self._changed.set()
        self._changed = anyio.Event()


@asynccontextmanager
async def clocked(kube: Kube, namespace: str, origin: float) -> AsyncIterator[ObjectClock]:
    """An ``ObjectClock`` of ``namespace`` (which must exist) while the block runs."""
    clock = ObjectClock(origin)

    async def follow(kind: str, ready: anyio.Event) -> None:
        items, version = await kube.list(kind, namespace)
        for item in items:
            clock.note(kind, item)
        ready.set()
        while True:
            async for event, obj in kube.watch(kind, namespace, resource_version=version):
                version = obj.get("metadata", {}).get("resourceVersion") or version
                if event in ("ADDED", "MODIFIED"):
                    clock.note(kind, obj)

    async with anyio.create_task_group() as tasks:
        for kind in COUNTED:
            ready = anyio.Event()
            tasks.start_soon(follow, kind, ready)
            await ready.wait()
        try:
            yield clock
        finally:
            tasks.cancel_scope.cancel()


@dataclass
class RosterStarted:
    """One roster's start on the platform: phase times (seconds after submit), what it made."""

    run_id: str
    agents: int
    opened: float
    """Namespace, owner, controller identity, router Service, CA Secret, NetworkPolicies."""
    admitted: float
    """Kueue admitted the roster's one Workload."""
    ready: float
    """Every ``start`` returned: each Sandbox Ready, its one pod Running."""
    clock: ObjectClock
    workload: Obj
    listed: dict[str, list[Obj]]
    """The run's objects of each ``COUNTED`` kind, listed once every agent was ready."""


async def start_roster(
    plane: KwokPlane, queue: str, agents: int, root: Path, *, timeout_s: float = 600.0
) -> RosterStarted:
    """Submit a roster of ``agents`` to the kubernetes platform on ``plane``'s KWOK nodes, start
    every agent at once as the run kernel does, and return the phase times; the run's
    namespace is deleted afterwards (not timed)."""
    roster = large_roster(agents)
    run_id = new_run_id()
    platform = KubernetesPlatform(
        settings(
            plane,
            cluster_queue=queue,
            startup_timeout_s=timeout_s,
            admission_timeout_s=timeout_s,
        )
    )
    submitted = time.monotonic()
    admission = platform.admit(roster)
    platform.router_tls(run_id)
    placement = RunPlacement(run_id, root / run_id, seed=1, router_url=ROUTER_URL)
    async with (
        Kube.connect(kubeconfig=str(plane.kubeconfig)) as observer,
        platform.session(placement) as session,
    ):
        opened = time.monotonic() - submitted
        async with clocked(observer, run_id, submitted) as clock:
            admission = await session.admit(admission)
            admitted = time.monotonic() - submitted

            async def start(name: str, descriptor: RuntimeDescriptor) -> None:
                launch = AgentLaunch(name, descriptor, "router-token", secrets.token_urlsafe(8))
                await session.start(launch)

            async with anyio.create_task_group() as tasks:
                for name, descriptor in platform.roster.items():
                    tasks.start_soon(start, name, descriptor)
            ready = time.monotonic() - submitted
        workload = await observer.get("Workload", objects.WORKLOAD, run_id)
        assert workload is not None
        listed = {kind: (await observer.list(kind, run_id))[0] for kind in COUNTED}
    return RosterStarted(run_id, agents, opened, admitted, ready, clock, workload, listed)


# ---- the baseline: the same objects straight through the API ---------------------------------


@dataclass
class DirectCreated:
    """The baseline's phase times (seconds after its start)."""

    agents: int
    created: float
    """Every object's create request answered."""
    running: float
    """Every pod Running."""


def direct_objects(
    run_id: str, roster: Mapping[str, RuntimeDescriptor], placement: Mapping[str, Any] = {}
) -> list[Obj]:
    """What a run's namespace holds for ``roster``, as plain objects the baseline creates
    itself: the platform's Secrets and policies, and for each Sandbox what Agent Sandbox makes
    of it (a headless Service and a pod from its template, with the pod-spec fields
    ``placement`` adds: the node selector and tolerations the platform's settings give)."""
    shutdown = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    made: list[Obj] = [
        routing.router_service(run_id, 7443),
        *routing.network_policies(run_id, controller_ports=[7443], bridge_ports=[7000]),
        objects.router_ca(run_id, b"-----BEGIN CERTIFICATE-----\n"),
    ]
    for agent, descriptor in roster.items():
        boot = b'{"router_token": "t"}'
        made.append(objects.agent_secrets(run_id, agent, boot, descriptor.files))
        sandbox = objects.sandbox(
            run_id, agent, descriptor, router_url=ROUTER_URL, seed=1, shutdown_at=shutdown
        )
        template: dict[str, Any] = sandbox["spec"]["podTemplate"]
        labels = template["metadata"]["labels"]
        meta = {"name": agent, "namespace": run_id, "labels": labels}
        spec = template["spec"] | dict(placement)
        made.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        made.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta,
                "spec": {"clusterIP": "None", "selector": labels},
            }
        )
    return made


async def create_directly(
    plane: KwokPlane,
    agents: int,
    *,
    in_flight: int = 64,
    timeout_s: float = 600.0,
    placement: Mapping[str, Any] | None = None,
) -> DirectCreated:
    """Create ``direct_objects`` for a roster of ``agents`` with ``in_flight`` requests at a
    time (no Kueue, no Agent Sandbox, no session), and time it until every pod is Running. The
    pods go on KWOK's nodes unless ``placement`` says otherwise."""
    placement = plane.pod_placement if placement is None else placement
    run_id = new_run_id()
    roster = {name: d for name, d in large_roster(agents).items()}
    limiter = anyio.CapacityLimiter(in_flight)
    async with Kube.connect(kubeconfig=str(plane.kubeconfig)) as kube:
        started = time.monotonic()
        await kube.create(objects.namespace(run_id))
        try:
            async with clocked(kube, run_id, started) as clock:

                async def create(obj: Obj) -> None:
                    async with limiter:
                        await kube.create(obj)

                async with anyio.create_task_group() as tasks:
                    for obj in direct_objects(run_id, roster, placement):
                        tasks.start_soon(create, obj)
                created = time.monotonic() - started
                with anyio.fail_after(timeout_s):
                    running = await clock.until_running(agents)
        finally:
            with anyio.CancelScope(shield=True):
                await delete_run_namespace(kube, run_id)
    return DirectCreated(agents, created, running)
