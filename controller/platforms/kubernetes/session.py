"""One run's sandboxes on a cluster: Kueue admission, one Agent Sandbox per agent (claimed from a
warm pool where one of the agent's shape has room, else made for it), readiness, termination as
evidence, teardown.

Three informers (Sandboxes, Pods, the Workload; all labelled with the run id) keep the session's
view of the namespace, two more (SandboxClaims, Pods) its view of the warm namespace once it
claims there; every wait below is level-triggered on that view, never a sleep loop. What that
view means lives beside this module: ``admission`` (the Workload), ``sandbox`` (a Sandbox's start
and end), ``warm`` (pools and claims), ``harvest`` and ``credentials``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
from anyio.abc import TaskGroup

from controller.agents.runtime import Harvest, RuntimeDescriptor, SandboxAccess
from controller.agents.termination import Observation, ProcessExit
from controller.platforms.kubernetes import admission as workload
from controller.platforms.kubernetes import harvest as harvesting
from controller.platforms.kubernetes import objects, routing, warm
from controller.platforms.kubernetes import sandbox as observed
from controller.platforms.kubernetes.claims import DELETE_WAIT_S, DELETES_IN_FLIGHT, WarmClaims
from controller.platforms.kubernetes.credentials import CredentialResolver
from controller.platforms.kubernetes.kube import Informer, Kube, Obj, at_once
from controller.platforms.kubernetes.sandbox import KubernetesSandbox
from controller.run.platform import (
    Admission,
    AdmissionRefused,
    AgentLaunch,
    HarvestedItem,
    PlatformError,
    PlatformSession,
    RunPlacement,
    Sandbox,
    SandboxStartError,
)

if TYPE_CHECKING:
    from controller.platforms.kubernetes.platform import KubernetesPlatform

__all__ = ["BridgeAddress", "KubernetesSandbox", "KubernetesSession"]

T = TypeVar("T")

BridgeAddress = Callable[[str, str, tuple[str, int]], Awaitable[tuple[str, int]]]
"""``(run_id, agent, (host, port)) -> (host, port)``: where the controller reaches a bridge.
The default is the agent pod's IP and the runtime's bridge port (no DNS lookup)."""


class KubernetesSession(WarmClaims, PlatformSession):
    """See the module docstring; built by ``KubernetesPlatform.session``."""

    def __init__(
        self,
        platform: KubernetesPlatform,
        kube: Kube,
        placement: RunPlacement,
        owner: Obj,
        tasks: TaskGroup,
    ) -> None:
        self.platform = platform
        self.kube = kube
        self.placement = placement
        self.run_id = placement.run_id
        self.owner = owner
        self._tasks = tasks
        self._changed = anyio.Event()
        self._agent_changed: dict[str, anyio.Event] = {}
        selector = objects.run_selector(self.run_id)
        self.sandboxes, self.pods, self.workloads = (
            Informer(
                kube,
                kind,
                self.run_id,
                label_selector=selector,
                notify=self._notify,
                index=objects.AGENT_LABEL,
            )
            for kind in ("Sandbox", "Pod", "Workload")
        )
        self._informers = [self.sandboxes, self.pods, self.workloads]
        self.claims, self.warm_pods = (
            Informer(
                kube,
                kind,
                warm.WARM_NAMESPACE,
                label_selector=selector,
                notify=self._notify,
                index=objects.AGENT_LABEL,
            )
            for kind in ("SandboxClaim", "Pod")
        )
        self._claimed: dict[str, warm.Claimed] = {}
        self._claiming = False
        """The run claims in the warm namespace: its policy there is applied with its others."""
        """Agents whose claims bound: their sandboxes come from the warm namespace."""
        self._sandboxes: list[KubernetesSandbox] = []
        self._service_ports: set[int] = set()
        """Ports of run services in the controller (the model gateway) agents may reach."""
        self._network_lock = anyio.Lock()
        self._router_ip = ""
        """The router Service's ClusterIP: agents' ``/etc/hosts`` maps its name there."""
        self._credentials = CredentialResolver(
            kube, self.run_id, platform.settings.credentials_namespace
        )
        self._shutdown_at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
            seconds=platform.settings.run_deadline_s
        )

    # ---- the view ----------------------------------------------------------------------------

    def _notify(self, changed: Obj | None) -> None:
        """Wake the waiters ``changed`` concerns: one agent's for its Sandbox or pod (a
        1,000-agent roster's pods change thousands of times while they start, and each change
        woke every agent's wait before), everyone after a relist or another object's change."""
        labels = {} if changed is None else changed["metadata"].get("labels") or {}
        agent = labels.get(objects.AGENT_LABEL)
        if agent is not None:
            event = self._agent_changed.pop(agent, None)
            if event is not None:
                event.set()
            return
        self._changed.set()
        self._changed = anyio.Event()
        for event in self._agent_changed.values():
            event.set()
        self._agent_changed = {}

    async def until(self, check: Callable[[], T | None], *, agent: str | None = None) -> T:
        """Wait until ``check()`` is not ``None``, re-evaluated after every change seen; with
        ``agent``, after changes to that agent's Sandbox and pods only (and relists), which is
        all a check of that agent may read; without, after changes to anything else (the
        Workload)."""
        for informer in self._informers:
            await informer.synced.wait()
        while True:
            changed = (
                self._changed
                if agent is None
                else self._agent_changed.setdefault(agent, anyio.Event())
            )
            result = check()
            if result is not None:
                return result
            await changed.wait()

    async def open(self) -> None:
        """The router's Service, its CA, the network policies; then start watching."""
        tls = self.platform.tls_for(self.run_id)
        calls: list[Callable[[], Coroutine[Any, Any, Any]]] = [self._apply_network]
        if tls is not None:
            ca = objects.owned(objects.router_ca(self.run_id, tls.ca_pem), self.owner)
            calls.append(lambda: self.kube.apply(ca))
        await at_once(*calls)
        for informer in (self.sandboxes, self.pods, self.workloads):
            self._tasks.start_soon(informer.run)

    async def _apply_network(self) -> None:
        """The router's Service and the policies, for the router and every run service's port."""
        port = _port(self.placement.router_url)
        bridge_ports = sorted({d.bridge_port for d in self.platform.roster.values()})
        external = self.platform.external_router
        service_ports = sorted(self._service_ports)
        manifests = [
            routing.router_service(self.run_id, port, service_ports, external=external),
            *routing.network_policies(
                self.run_id,
                controller_ports=[port, *self._service_ports],
                bridge_ports=bridge_ports,
                external=external,
            ),
        ]
        if external:
            manifests.append(routing.router_endpoints(self.run_id, external, port, service_ports))

        async def apply(manifest: Obj) -> None:
            applied = await self.kube.apply(objects.owned(manifest, self.owner))
            if manifest["kind"] == "Service":
                self._router_ip = applied.get("spec", {}).get("clusterIP") or ""

        calls = [functools.partial(apply, manifest) for manifest in manifests]
        await at_once(*calls, *([self._apply_run_policy] if self._claiming else []))

    async def _apply_run_policy(self) -> None:
        """The run's policy in the warm namespace, for the router and every run service's port
        (not owned: teardown deletes it)."""
        await self.kube.apply(
            warm.run_policy(
                self.run_id,
                controller=routing.controller_peer(self.run_id, self.platform.external_router),
                controller_ports=[_port(self.placement.router_url), *self._service_ports],
                bridge_ports=sorted({d.bridge_port for d in self.platform.roster.values()}),
            )
        )

    async def _advertise_services(self, launch: AgentLaunch) -> RuntimeDescriptor:
        """``launch``'s descriptor with run services' URLs pointing at the router's Service.

        A variable a run service granted (absent from the roster's descriptor) whose URL's host
        is where the controller listens names a service in the controller (the model gateway):
        agents reach it through the per-run Service, and the policies let them, on its port. A
        claimed pod has no ``/etc/hosts`` entry for the Service's name: it gets its address.
        """
        descriptor = launch.descriptor
        declared = self.platform.roster[launch.name].environment
        environment = dict(descriptor.environment)
        ports: set[int] = set()
        for name, value in descriptor.environment.items():
            if declared.get(name) == value:
                continue
            url = urlsplit(value)
            if (
                url.scheme in ("http", "https", "ws", "wss")
                and url.hostname == self.platform.router_host
                and url.port is not None
            ):
                host = routing.router_host(self.run_id)
                if launch.name in self._claimed and self._router_ip:
                    host = self._router_ip
                environment[name] = urlunsplit(url._replace(netloc=f"{host}:{url.port}"))
                ports.add(url.port)
        async with self._network_lock:
            if not ports <= self._service_ports:
                self._service_ports |= ports
                await self._apply_network()
        return self.platform.pinned(dataclasses.replace(descriptor, environment=environment))

    # ---- admission ---------------------------------------------------------------------------

    async def admit(self, admission: Admission) -> Admission:
        settings = self.platform.settings
        sets = self.platform.pod_sets
        await self.kube.apply(
            objects.owned(objects.local_queue(self.run_id, settings.cluster_queue), self.owner)
        )
        await self.kube.apply(objects.owned(objects.workload(self.run_id, sets), self.owner))
        started = time.monotonic()
        outcome: tuple[str, Obj] | None = None
        with anyio.move_on_after(settings.admission_timeout_s):
            outcome = await self.until(lambda: workload.workload_state(self.workloads))
        if outcome is None:
            raise workload.admission_timed_out(self.workloads, settings, admission)
        state, admitted = outcome
        if state != "admitted":
            raise AdmissionRefused(
                f"the roster's Workload was {state} before Kueue admitted it",
                reason=f"workload-{state}",
                admission=admission,
            )
        queue = workload.queue_admission(
            admitted, sets, waited_ms=(time.monotonic() - started) * 1000
        )
        if settings.warm_pools:
            await self._claim_warm()
        return dataclasses.replace(admission, queue=queue)

    async def lost(self) -> PlatformError:
        state, held = await self.until(lambda: workload.workload_loss(self.workloads))
        return workload.capacity_lost(state, held)

    # ---- sandboxes ---------------------------------------------------------------------------

    async def start(self, launch: AgentLaunch) -> Sandbox:
        agent = launch.name
        settings = self.platform.settings
        credentials = await self._credentials.values(launch)
        descriptor = await self._advertise_services(launch)
        if agent in self._claimed:
            return await self._start_claimed(launch, descriptor, launch.secrets(credentials))
        manifests = [
            objects.agent_secrets(
                self.run_id, agent, launch.secrets(credentials).to_json(), descriptor.files
            ),
            objects.sandbox(
                self.run_id,
                agent,
                descriptor,
                router_url=self.agent_router_url,
                seed=self.placement.seed,
                shutdown_at=self._shutdown_at,
                placement=settings.agent_placement,
                host_aliases=routing.host_aliases(self.run_id, self._router_ip)
                if self._router_ip
                else (),
            ),
        ]
        try:
            for manifest in manifests:
                await self.kube.create_or_apply(objects.owned(manifest, self.owner))
        except PlatformError as exc:
            raise SandboxStartError(
                f"cannot create the sandbox of {agent}: {exc}", reason="sandbox-create-failed"
            ) from exc
        return await self._running(agent, launch.bridge_token, descriptor.bridge_port)

    replaces_lost_sandboxes = True

    async def replacement(self, sandbox: Sandbox) -> Sandbox | None:
        """The Sandbox controller re-creates a deleted pod under the same name: the new pod, once
        it runs, as a new handle (``None`` when the pod stays, the Sandbox is going, or the
        sandbox was claimed: a claim's replacement would wait for a provision nobody sends)."""
        assert isinstance(sandbox, KubernetesSandbox)
        if sandbox.owner[0] == "SandboxClaim":
            return None
        if not observed.replaceable(self.sandboxes, self.pods, sandbox):
            return None
        return await self._running(
            sandbox.name, sandbox.access.bridge_token, sandbox.port, superseded=sandbox.uid
        )

    async def _running(
        self, agent: str, bridge_token: str, bridge_port: int, *, superseded: str | None = None
    ) -> KubernetesSandbox:
        """Wait for the Sandbox's one live pod to run (not the ``superseded`` one); its handle."""
        settings = self.platform.settings
        started: tuple[str, Obj, Obj | None] | None = None
        with anyio.move_on_after(settings.startup_timeout_s):
            started = await self.until(
                lambda: observed.started(self.sandboxes, self.pods, agent, superseded=superseded),
                agent=agent,
            )
        if started is None:
            why = observed.describe(self.sandboxes, self.pods, agent)
            placed = not any(observed.unschedulable(pod) for pod in self.pods.labelled(agent))
            raise SandboxStartError(
                f"the Sandbox of {agent} had no Ready, running pod within "
                f"{settings.startup_timeout_s:g} s ({why}); "
                + (
                    f"see kubectl describe sandbox {agent} -n {self.run_id}"
                    if placed
                    else "no node could take its pod: lower the roster's resource requests "
                    "(its runtimes' Resources), or add nodes or capacity to the agents' nodes"
                ),
                reason="startup-timeout" if placed else "pod-unschedulable",
            )
        state, _, pod = started
        if state == "unpullable":
            assert pod is not None
            raise SandboxStartError(
                f"the image of {agent} cannot be pulled: {observed.unpullable(pod)}; build and "
                f"push it (or run scripts/build-images.sh) and pin it by digest",
                reason="image-unpullable",
            )
        if state != "ready":
            how = f" ({observed.exited(pod)})" if pod is not None else ""
            raise SandboxStartError(
                f"the Sandbox of {agent} {state} before it was ready{how}",
                reason="exited-before-ready",
            )
        assert pod is not None
        default = (pod.get("status", {}).get("podIP") or "", bridge_port)
        host, port = await self.platform.bridge_address(self.run_id, agent, default)
        exited: Observation[ProcessExit] = Observation()
        access = SandboxAccess(agent, host, port, bridge_token, exited)
        metadata = pod["metadata"]
        handle = KubernetesSandbox(
            agent, access, metadata["name"], metadata["uid"], bridge_port, namespace=self.run_id
        )
        self._sandboxes.append(handle)
        self._tasks.start_soon(self._observe_exit, handle)
        return handle

    @property
    def agent_router_url(self) -> str:
        scheme = "wss" if self.platform.tls_for(self.run_id) is not None else "ws"
        host = routing.router_host(self.run_id)
        return f"{scheme}://{host}:{_port(self.placement.router_url)}"

    async def _observe_exit(self, handle: KubernetesSandbox) -> None:
        owners, pods = (
            (self.claims, self.warm_pods)
            if handle.owner[0] == "SandboxClaim"
            else (self.sandboxes, self.pods)
        )
        ended = await self.until(lambda: observed.ended(owners, pods, handle), agent=handle.name)
        handle.access.exit.set(ended)

    async def stop(self, sandbox: Sandbox, *, grace_s: float) -> ProcessExit:
        assert isinstance(sandbox, KubernetesSandbox)
        exited = sandbox.access.exit
        with anyio.move_on_after(grace_s):
            await exited
        await harvesting.capture_log(self.kube, sandbox.namespace, sandbox)
        if exited.done:
            return await exited
        await self.kube.delete(*sandbox.owner, sandbox.namespace)
        with anyio.move_on_after(DELETE_WAIT_S):
            return await exited
        exited.set(ProcessExit(signal=signal.SIGKILL))
        return await exited

    async def harvest(self, sandbox: Sandbox, declared: Harvest) -> list[HarvestedItem]:
        assert isinstance(sandbox, KubernetesSandbox)
        return await harvesting.harvest(
            self.kube, sandbox.namespace, self.placement.run_dir, sandbox, declared
        )

    async def teardown(self) -> None:
        """Release the queue's capacity and the sandboxes (the namespace goes after); the
        deletes are pipelined, ``DELETES_IN_FLIGHT`` at a time (one after another, a
        1,000-agent roster's teardown took minutes)."""
        limiter = anyio.CapacityLimiter(DELETES_IN_FLIGHT)
        failed: list[PlatformError] = []

        async def delete(name: str) -> None:
            async with limiter:
                try:
                    await self.kube.delete("Sandbox", name, self.run_id)
                except PlatformError as exc:
                    failed.append(exc)

        async with anyio.create_task_group() as deletes:
            for name in list(self.sandboxes.objects):
                deletes.start_soon(delete, name)
        await self.kube.delete("Workload", objects.WORKLOAD, self.run_id)
        failed += await self._release_warm()
        if failed:
            raise failed[0]


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port
