"""A run's part in the warm namespace (``warm``): its agents' claims on the pools, made all at
once after the roster's quota was admitted and either all bound or all let go; each claimed pod
handed its provision; and, at teardown, the claims released and their pods waited for.

``WarmClaims`` is the half of ``KubernetesSession`` that works there; the session holds the view
(``claims`` and ``warm_pods``, two informers it starts once it claims) and calls these.
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup

from controller.agents.runtime import RuntimeDescriptor, SandboxAccess
from controller.agents.termination import Observation, ProcessExit
from controller.platforms.kubernetes import objects, routing, warm
from controller.platforms.kubernetes import sandbox as observed
from controller.platforms.kubernetes.kube import Informer, Kube, KubeError, Obj, at_once
from controller.platforms.kubernetes.sandbox import KubernetesSandbox
from controller.run.platform import AgentLaunch, PlatformError, RunPlacement, SandboxStartError
from society_sandbox.boot import Secrets
from society_sandbox.warm import Provision

if TYPE_CHECKING:
    from controller.platforms.kubernetes.platform import KubernetesPlatform

T = TypeVar("T")

DELETE_WAIT_S = 30.0
"""How long a deleted sandbox's pod may take to go."""
DELETES_IN_FLIGHT = 32


class WarmClaims(ABC):
    """Claiming, provisioning and releasing warm sandboxes for one run (see the module)."""

    kube: Kube
    run_id: str
    platform: KubernetesPlatform
    placement: RunPlacement
    claims: Informer
    warm_pods: Informer
    _claimed: dict[str, warm.Claimed]
    """Agents whose claims bound: their sandboxes come from the warm namespace."""
    _claiming: bool
    _informers: list[Informer]
    _tasks: TaskGroup
    _shutdown_at: datetime.datetime
    _network_lock: anyio.Lock
    _router_ip: str
    _sandboxes: list[KubernetesSandbox]

    @abstractmethod
    async def until(self, check: Callable[[], T | None], *, agent: str | None = None) -> T: ...

    @abstractmethod
    async def _apply_run_policy(self) -> None: ...

    @abstractmethod
    async def _observe_exit(self, handle: KubernetesSandbox) -> None: ...

    @property
    @abstractmethod
    def agent_router_url(self) -> str: ...

    async def _claim_warm(self) -> None:
        """Claim a warm sandbox for every agent whose shape has a pool with room, all at once
        after the roster's quota was admitted: either every claim binds within
        ``warm.CLAIM_TIMEOUT_S`` or all are let go and the whole roster starts cold."""
        try:
            pools, _ = await self.kube.list("SandboxWarmPool", warm.WARM_NAMESPACE)
        except KubeError:
            return  # no warm pools here (no extensions, no namespace, or not ours to read)
        wanted = warm.placeable(
            {name: self.platform.pinned(d) for name, d in self.platform.roster.items()}, pools
        )
        if not wanted:
            return
        for informer in (self.claims, self.warm_pods):
            self._informers.append(informer)
            self._tasks.start_soon(informer.run)
        # Both policies, at once, before any claim: the network has them in force by the time
        # the claims' pods carry the run's labels (the provision's and the runtime's first
        # connections).
        provision = warm.provision_policy(
            self.run_id,
            controller=routing.controller_peer(self.run_id, self.platform.external_router),
            bridge_ports=sorted({d.bridge_port for d in self.platform.roster.values()}),
        )
        async with self._network_lock:
            self._claiming = True
            await at_once(self._apply_run_policy, lambda: self.kube.apply(provision))
        claimed: dict[str, warm.Claimed] = {}
        made: list[str] = []
        failed: list[str] = []

        async def claim(agent: str, pool_of: str) -> None:
            name = warm.claim_name(self.run_id, agent)
            try:
                await self.kube.create(
                    warm.claim(self.run_id, agent, pool_of, shutdown_at=self._shutdown_at)
                )
            except PlatformError as exc:  # (a name held by another object: not ours to delete)
                failed.append(f"{agent}: {exc}")
                return
            made.append(agent)
            outcome = await self.until(
                lambda: warm.claim_outcome(self.claims.objects.get(name)), agent=agent
            )
            if isinstance(outcome, warm.Claimed):
                claimed[agent] = outcome
            else:
                failed.append(f"{agent}: {outcome}")

        with anyio.move_on_after(warm.CLAIM_TIMEOUT_S):
            async with anyio.create_task_group() as claims:
                for agent, pool_of in wanted.items():
                    claims.start_soon(claim, agent, pool_of)
        if failed or len(claimed) < len(wanted):
            left = await self._release_claims(made)
            self._claiming = False
            for policy in warm.policy_names(self.run_id):
                await self.kube.delete("NetworkPolicy", policy, warm.WARM_NAMESPACE)
            if left:
                raise left[0]  # a claim that stays would hold a pool's sandbox: say so
            return
        self._claimed = claimed

    async def _claimed_pod_gone(self, agent: str) -> None:
        await self.until(lambda: None if self.warm_pods.labelled(agent) else True, agent=agent)

    async def _release_claims(self, agents: list[str]) -> list[PlatformError]:
        """Delete the claims of ``agents`` (Agent Sandbox then deletes their sandboxes); what
        failed."""
        limiter = anyio.CapacityLimiter(DELETES_IN_FLIGHT)
        failed: list[PlatformError] = []

        async def release(agent: str) -> None:
            async with limiter:
                try:
                    name = warm.claim_name(self.run_id, agent)
                    await self.kube.delete("SandboxClaim", name, warm.WARM_NAMESPACE)
                except PlatformError as exc:
                    failed.append(exc)

        async with anyio.create_task_group() as deletes:
            for agent in agents:
                deletes.start_soon(release, agent)
        return failed

    async def _release_warm(self) -> list[PlatformError]:
        """At teardown: the claims released, their pods gone (they are outside the run's
        namespace, whose deletion does not wait for them; bounded by ``DELETE_WAIT_S``), the
        run's policy there deleted; what failed."""
        if not self._claimed:
            return []  # (claims that did not all bind were let go with their policies)
        failed = await self._release_claims(list(self._claimed))
        with anyio.move_on_after(DELETE_WAIT_S):
            async with anyio.create_task_group() as waits:
                for agent in self._claimed:
                    waits.start_soon(self._claimed_pod_gone, agent)
        for policy in warm.policy_names(self.run_id):
            try:
                await self.kube.delete("NetworkPolicy", policy, warm.WARM_NAMESPACE)
            except PlatformError as exc:
                failed.append(exc)
        return failed

    async def _start_claimed(
        self, launch: AgentLaunch, descriptor: RuntimeDescriptor, secrets: Secrets
    ) -> KubernetesSandbox:
        """Wait for the claimed pod to run with the run's labels, then hand it its provision."""
        agent = launch.name
        settings = self.platform.settings
        claimed = self._claimed[agent]
        started: tuple[str, Obj | None] | None = None
        with anyio.move_on_after(settings.startup_timeout_s):
            started = await self.until(
                lambda: observed.claimed(self.claims, self.warm_pods, agent, claimed.claim),
                agent=agent,
            )
        if started is None or started[0] != "ready" or started[1] is None:
            state = "had no running pod" if started is None else started[0]
            raise SandboxStartError(
                f"the claimed sandbox {claimed.sandbox} of {agent} {state} within "
                f"{settings.startup_timeout_s:g} s; see kubectl describe sandboxclaim "
                f"{claimed.claim} -n {warm.WARM_NAMESPACE}",
                reason="claimed-sandbox-lost",
            )
        pod = started[1]
        port = urlsplit(self.placement.router_url).port
        tls = self.platform.tls_for(self.run_id)
        environment = objects.agent_environment(
            agent,
            descriptor,
            router_url=self.agent_router_url,
            seed=self.placement.seed,
            router_address=f"{self._router_ip}:{port}" if self._router_ip else None,
        )
        line = Provision(
            environment=environment,
            secrets=secrets.to_json(),
            router_ca=None if tls is None else tls.ca_pem,
            files=dict(descriptor.files),
        ).to_line()
        default = (pod["status"]["podIP"], descriptor.bridge_port)
        host, bridge_port = await self.platform.bridge_address(self.run_id, agent, default)
        try:
            await warm.provision(host, bridge_port, line, limit_s=warm.PROVISION_TIMEOUT_S)
        except PlatformError as exc:
            raise SandboxStartError(str(exc), reason=exc.reason) from exc
        exited: Observation[ProcessExit] = Observation()
        access = SandboxAccess(agent, host, bridge_port, launch.bridge_token, exited)
        metadata = pod["metadata"]
        handle = KubernetesSandbox(
            agent,
            access,
            metadata["name"],
            metadata["uid"],
            descriptor.bridge_port,
            namespace=warm.WARM_NAMESPACE,
            owner=("SandboxClaim", claimed.claim),
            start="warm" if claimed.warm else "cold",
        )
        self._sandboxes.append(handle)
        self._tasks.start_soon(self._observe_exit, handle)
        return handle
