"""The ``Platform`` interface of a profile: admit, start, expose bridges, harvest, tear down.

The kernel drives it; ``LocalPlatform`` (child processes) implements it, and a Kubernetes
platform (one Agent Sandbox per agent, Kueue admission) implements the same seams.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import anyio

from controller.agents.runtime import Harvest, RuntimeDescriptor, SandboxAccess
from controller.agents.termination import ProcessExit
from controller.errors import PlatformError as PlatformError
from controller.events.run import AgentRequest, Capacity, HarvestOutcome, QueueAdmission
from ledger import Event
from society_sandbox.boot import Secrets

if TYPE_CHECKING:
    from controller.network.tls import RouterTLS
    from controller.services import LocalModelStarter


@dataclass(frozen=True, slots=True)
class Admission:
    """The complete roster's requests against the platform's capacity."""

    requests: tuple[AgentRequest, ...]
    requested: Capacity
    capacity: Capacity
    queue: QueueAdmission | None = None
    """Where a cluster's queue admitted the roster (Kueue), once it did."""


class AdmissionRefused(PlatformError):
    """The complete roster does not fit; nothing was started."""

    reason = "admission-refused"

    def __init__(
        self,
        detail: str,
        *,
        reason: str | None = None,
        next_step: str | None = None,
        admission: Admission,
    ) -> None:
        super().__init__(detail, reason=reason, next_step=next_step)
        self.admission = admission


class SandboxStartError(PlatformError):
    """One agent's sandbox could not be started."""

    reason = "sandbox-start-failed"


@dataclass(frozen=True, slots=True)
class RunPlacement:
    """Where a run lives: its id, its directory under the artifact root, its seed, its router."""

    run_id: str
    run_dir: Path
    seed: int
    router_url: str
    router_ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class AgentLaunch:
    """Everything needed to start one agent's sandbox; the tokens go to its secrets file only."""

    name: str
    descriptor: RuntimeDescriptor
    router_token: str
    bridge_token: str
    service_secrets: Mapping[str, str] = field(default_factory=dict)
    """What the run's services issued this agent (a model gateway token), by credential name."""

    def secrets(self, credentials: Mapping[str, str]) -> Secrets:
        """The secrets file's contents, once the platform resolved the credential references."""
        granted = {**credentials, **self.service_secrets}
        return Secrets(self.router_token, self.bridge_token, granted)


@dataclass(frozen=True, slots=True)
class HarvestedItem:
    """One declared file or log, copied into the run's artifacts or not, and why."""

    kind: Literal["workspace", "log"]
    name: str
    outcome: HarvestOutcome
    limit_bytes: int
    sha256: str | None = None
    size: int | None = None
    artifact: str | None = None
    """Relative to the run directory."""
    detail: str | None = None


class Sandbox(ABC):
    """One started agent application: how to reach its bridge, and its process exit."""

    name: str
    access: SandboxAccess
    start: Literal["warm", "cold"] | None = None
    """On a platform with warm pools: whether the sandbox was made ahead (``warm``) or for this
    agent (``cold``); ``None`` where the platform has no pools."""

    @property
    def exit(self) -> ProcessExit | None:
        return self.access.exit.peek()


class PlatformSession(ABC):
    """The run's sandboxes. Leaving the ``async with`` tears everything down, on every path."""

    async def admit(self, admission: Admission) -> Admission:
        """Hold the roster's capacity before any sandbox starts; raises ``AdmissionRefused``.

        A cluster waits here for its queue (Kueue) to admit the roster; the default grants what
        ``Platform.admit`` checked.
        """
        return admission

    async def lost(self) -> PlatformError:
        """Returns once the platform lost the run's admitted capacity (evicted); the kernel then
        ends the run as ``PlatformLost``. The default never returns."""
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    @abstractmethod
    async def start(self, launch: AgentLaunch) -> Sandbox:
        """Start one sandbox; returns once its process exists. Raises ``SandboxStartError``."""

    replaces_lost_sandboxes: ClassVar[bool] = False
    """Whether the platform re-creates a sandbox whose process was lost (a cluster's Sandbox
    controller re-creates a deleted pod); before dispatch the kernel then waits for it."""

    async def replacement(self, sandbox: Sandbox) -> Sandbox | None:
        """Before dispatch, once ``sandbox``'s process ended: the sandbox the platform re-created
        in its place, once its process runs, or ``None`` when there is none (the process ended by
        itself, or the platform replaces nothing). Raises ``SandboxStartError``."""
        return None

    @abstractmethod
    async def stop(self, sandbox: Sandbox, *, grace_s: float) -> ProcessExit:
        """Wait up to ``grace_s`` for the sandbox to end by itself, then end it; its exit."""

    @abstractmethod
    async def harvest(self, sandbox: Sandbox, declared: Harvest) -> list[HarvestedItem]:
        """Copy what ``declared`` names into the run's artifacts; one item per file or log."""


class Platform(ABC):
    """A profile's execution backend."""

    profile: ClassVar[str]
    router_host: str = "127.0.0.1"
    """Where the router listens so that this platform's sandboxes can reach it."""

    async def prepare(self, run_id: str) -> None:
        """Reserve what the run needs before its controller starts (a cluster: the run's
        namespace, owner and controller identity); idempotent. Nothing by default."""
        return None

    async def reap(self, run_id: str, artifact_root: Path) -> None:
        """Remove everything the run left, whichever way it ended; idempotent, safe to retry."""
        return None

    @abstractmethod
    def admit(self, roster: Mapping[str, RuntimeDescriptor]) -> Admission:
        """Check the complete roster against capacity; raises ``AdmissionRefused``."""

    @abstractmethod
    def session(self, placement: RunPlacement) -> AbstractAsyncContextManager[PlatformSession]:
        """Own the run's sandboxes for the duration of the block."""

    def router_tls(self, run_id: str) -> RouterTLS | None:
        """The router's TLS for this run (a per-run CA), or ``None`` for plain ``ws://``."""
        return None

    def agent_router_url(self, router_url: str) -> str:
        """The router's URL as sandboxes reach it (clusters rewrite the host)."""
        return router_url

    def router_socket(self, run_dir: Path) -> socket.socket | None:
        """A bound Unix socket the router also accepts on (local sandboxes' only way to it)."""
        return None

    def run_evidence(self) -> Sequence[Event]:
        """Core events the kernel records right after ``RunStarted`` (how agents are isolated)."""
        return ()

    def local_model(self) -> LocalModelStarter | None:
        """How this platform starts the run's local model server for the run's services (it owns
        the processes); ``None``: it serves no local model."""
        return None


def roster_requests(
    roster: Mapping[str, RuntimeDescriptor],
) -> tuple[tuple[AgentRequest, ...], Capacity]:
    """What each roster agent asks of a platform's capacity, and their sum."""
    requests = tuple(
        AgentRequest(
            agent=name,
            runtime=type(descriptor).runtime,
            cpu=descriptor.resources.cpu,
            memory_mib=descriptor.resources.memory_mib,
        )
        for name, descriptor in roster.items()
    )
    requested = Capacity(
        cpu=round(sum(r.cpu for r in requests), 6),
        memory_mib=sum(r.memory_mib for r in requests),
        agents=len(requests),
    )
    return requests, requested
