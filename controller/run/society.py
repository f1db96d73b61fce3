"""The roster's agents through one run: start, attach, authenticate, watch, stop, harvest.

Each agent has one keeper task that starts its sandbox, attaches its bridge and holds it until
teardown, and one watcher task that records how it ended, whenever that is. Before dispatch an
ended or failed agent fails the readiness gate, unless the platform replaces its sandbox (a
cluster's Sandbox controller re-creates a deleted pod): then it is out of the gate until the
replacement's bridge attached and its new router session authenticated.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from controller.agents.runtime import (
    Attachment,
    RuntimeDescriptor,
    RuntimeDescriptorError,
    SandboxAccess,
)
from controller.agents.termination import Completed, Exited, Failed, Signaled, Termination
from controller.events.run import (
    AgentProcessExited,
    AgentProcessSignaled,
    AgentRuntimeArtifact,
    AgentRuntimeCompleted,
    AgentRuntimeFailed,
    AgentRuntimeReady,
    AgentRuntimeStartFailed,
    AgentWorkspaceFileHarvested,
    DeclaredFile,
    PlatformFailed,
    RunPhase,
)
from controller.run.platform import AgentLaunch, PlatformError, PlatformSession, Sandbox
from controller.run.progress import Counter, Progress
from controller.run.readiness import ReadinessGate
from ledger.errors import CatalogError, LedgerError
from ledger.events import Event
from ledger.writer import LedgerWriter

if TYPE_CHECKING:
    from controller.run.services import RunServices

KERNEL = "kernel"
STOP_GRACE_S = 5.0
"""How long an agent may take to end by itself at teardown before it is signalled."""
_ASK_TO_STOP_S = 2.0
_RECORD_GRACE_S = 3.0


@dataclass(eq=False)
class AgentSlot:
    """One roster agent's way through the run."""

    name: str
    descriptor: RuntimeDescriptor
    participant: Any = None
    sandbox: Sandbox | None = None
    attachment: Attachment[Any] | None = None
    requested_at: float = 0.0
    service_secrets: Mapping[str, str] = field(default_factory=dict)
    released: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)
    """Set once the agent is ready or its start failed."""
    recorded: anyio.Event = field(default_factory=anyio.Event)
    """Set once its termination is in the ledger (or it never started)."""
    replaced: anyio.Event = field(default_factory=anyio.Event)
    """Set once the current sandbox's watcher knows whether the platform replaced it."""
    holding: anyio.CancelScope | None = None
    """The current sandbox's attachment; cancelled when the sandbox is replaced."""
    sessions: int = 0
    """The agent's router sessions when its sandbox was lost: a replacement's must be newer."""
    was_ready: bool = False

    @property
    def runtime(self) -> str:
        return type(self.descriptor).runtime


class Society:
    """The run's agents; ``start`` them into ``tasks``, ``wind_down`` once, on every path."""

    def __init__(
        self,
        roster: Mapping[str, RuntimeDescriptor],
        writer: LedgerWriter,
        progress: Progress,
    ) -> None:
        self.slots = {name: AgentSlot(name, descriptor) for name, descriptor in roster.items()}
        self.gate = ReadinessGate(self.slots)
        self.writer = writer
        self.progress = progress
        self.phase: RunPhase = "startup"

    @property
    def dispatched(self) -> bool:
        return self.phase != "startup"

    async def record(self, event: Event) -> None:
        """Append a kernel event; a failed or completed ledger keeps what it has."""
        try:
            await self.writer.append(event, producer=KERNEL)
        except LedgerError:
            pass

    def start(
        self,
        router: Any,
        session: PlatformSession,
        tasks: TaskGroup,
        credentials: Mapping[str, Any],
    ) -> tuple[Counter, Counter]:
        started = self.progress.counter("agents started", len(self.slots))
        readied = self.progress.counter("agents ready", len(self.slots))
        for slot in self.slots.values():
            credential = credentials[slot.name]
            slot.participant = credential.participant
            launch = AgentLaunch(
                name=slot.name,
                descriptor=slot.descriptor,
                router_token=credential.token,
                bridge_token=secrets.token_urlsafe(32),
                service_secrets=slot.service_secrets,
            )
            tasks.start_soon(self._keep, slot, launch, session, router, tasks, started, readied)
        return started, readied

    def grant(self, services: RunServices) -> None:
        """Give each agent what the run's services granted it: variables and secrets."""
        for slot in self.slots.values():
            slot.descriptor = services.descriptor_for(slot.name, slot.descriptor)
            slot.service_secrets = services.secrets_for(slot.name)

    def dead_at_the_gate(self) -> list[str]:
        """Agents whose process is gone (or never started), checked right before dispatch."""
        return [
            slot.name
            for slot in self.slots.values()
            if slot.sandbox is None or slot.sandbox.exit is not None
        ]

    # ---- one agent ---------------------------------------------------------------------------

    async def _keep(
        self,
        slot: AgentSlot,
        launch: AgentLaunch,
        session: PlatformSession,
        router: Any,
        tasks: TaskGroup,
        started: Counter,
        readied: Counter,
    ) -> None:
        """Start one agent's sandbox, then attach it (again for each replacement)."""
        slot.requested_at = time.monotonic()
        try:
            slot.sandbox = await session.start(launch)
        except PlatformError as exc:
            await self._start_failed(slot, exc.reason, str(exc))
        except Exception as exc:
            await self._start_failed(slot, "spawn-failed", f"{type(exc).__name__}: {exc}")
        if slot.sandbox is None:
            slot.settled.set()
            slot.recorded.set()
            return
        started.advance()
        while slot.sandbox is not None:
            sandbox = slot.sandbox
            slot.attachment, slot.settled, slot.replaced = None, anyio.Event(), anyio.Event()
            tasks.start_soon(self._watch, slot, session, router)
            with anyio.CancelScope() as slot.holding:
                await self._attach(slot, session, router, readied)
            await slot.replaced.wait()
            if slot.sandbox is sandbox:
                return

    async def _attach(
        self, slot: AgentSlot, session: PlatformSession, router: Any, readied: Counter
    ) -> None:
        """Attach and authenticate the agent's current sandbox, then hold its bridge until
        released (or until its sandbox is replaced before dispatch)."""
        descriptor = slot.descriptor
        try:
            with anyio.fail_after(descriptor.ready_timeout_s) as readiness:
                async with descriptor.attach(self._access(slot)) as attachment:
                    slot.attachment = attachment
                    await router.wait_authenticated(slot.name, after=slot.sessions)
                    await self._ready(slot)
                    if not slot.was_ready:
                        readied.advance()
                    slot.was_ready = True
                    slot.settled.set()
                    readiness.deadline = math.inf  # ready: hold the bridge until released
                    await slot.released.wait()
        except RuntimeDescriptorError as exc:
            await self._attach_failed(slot, session, exc.reason, str(exc))
        except TimeoutError:
            attached = "attached" if slot.attachment else "not attached"
            authenticated = "" if router.is_authenticated(slot.name) else "not "
            await self._attach_failed(
                slot,
                session,
                "ready-timeout",
                f"not ready within {descriptor.ready_timeout_s:g} s (bridge {attached}, router "
                f"session {authenticated}authenticated)",
            )
        except Exception as exc:
            await self._attach_failed(
                slot, session, "attach-failed", f"{type(exc).__name__}: {exc}"
            )
        finally:
            slot.settled.set()

    async def _attach_failed(
        self, slot: AgentSlot, session: PlatformSession, reason: str, detail: str
    ) -> None:
        """Fail the gate, unless the sandbox ended on a platform that may replace it: then its
        watcher decides (a replacement, or the gate fails)."""
        assert slot.sandbox is not None
        if session.replaces_lost_sandboxes and slot.sandbox.exit is not None:
            return
        await self._start_failed(slot, reason, detail)

    def _access(self, slot: AgentSlot) -> SandboxAccess:
        """The platform's access to the sandbox, plus recording of the runtime's own events."""
        assert slot.sandbox is not None
        declared = slot.descriptor.events

        async def record(event: Event) -> None:
            if type(event) not in declared:
                raise CatalogError(
                    f"the {slot.runtime} runtime recorded {type(event).__qualname__}, which its "
                    f"descriptor's events do not declare",
                    reason="undeclared-event",
                )
            try:
                await self.writer.append(event, producer=f"runtime:{slot.name}")
            except LedgerError:
                pass  # a failed or completed ledger keeps what it has

        return dataclasses.replace(slot.sandbox.access, record=record)

    async def _ready(self, slot: AgentSlot) -> None:
        assert slot.sandbox is not None and slot.attachment is not None
        if slot.sandbox.exit is not None or slot.attachment.termination.done:
            raise RuntimeDescriptorError(
                f"agent {slot.name} ended before it was ready", reason="exited-before-ready"
            )
        descriptor = slot.descriptor
        await self.record(
            AgentRuntimeReady(
                agent=slot.name,
                runtime=slot.runtime,
                participant_id=slot.participant.id,
                image=descriptor.image,
                command=list(descriptor.command),
                environment=sorted(descriptor.environment),
                credentials=sorted(descriptor.credentials),
                files=[
                    DeclaredFile(path=path, sha256=digest, size=size)
                    for path, (digest, size) in descriptor.file_digests().items()
                ],
                startup_ms=(time.monotonic() - slot.requested_at) * 1000,
                sandbox_start=slot.sandbox.start,
            )
        )
        self.gate.ready(slot.name)

    async def _start_failed(self, slot: AgentSlot, reason: str, detail: str) -> None:
        if not self.dispatched and self.gate.fail(slot.name, reason, detail):
            await self.record(
                AgentRuntimeStartFailed(
                    agent=slot.name, runtime=slot.runtime, reason=reason, detail=detail
                )
            )

    async def _watch(self, slot: AgentSlot, session: PlatformSession, router: Any) -> None:
        """Record how the agent ended, whenever it ends; before dispatch that fails the gate,
        unless the platform replaces its sandbox."""
        assert slot.sandbox is not None
        replaced = False
        try:
            ended = await slot.sandbox.access.exit
            phase = self.phase
            if phase == "startup":
                self.gate.withdraw(slot.name)  # out of the gate until ready again, if ever
                slot.sessions = router.sessions(slot.name)  # a replacement's session is newer
            termination: Termination = ended.plain()
            if slot.attachment is None:
                with anyio.move_on_after(0.5):  # an attach racing the exit
                    await slot.settled.wait()
            if slot.attachment is not None:
                with anyio.move_on_after(_RECORD_GRACE_S):
                    termination = await slot.attachment.termination
            if phase == "startup" and session.replaces_lost_sandboxes:
                replaced = await self._replace(slot, session, termination)
                if replaced:
                    return
            if phase == "startup":
                await self._start_failed(
                    slot, "exited-before-dispatch", f"ended before dispatch: {termination}"
                )
            await self.record(termination_event(slot, termination, phase))
        finally:
            if not replaced:
                slot.recorded.set()
            slot.replaced.set()

    async def _replace(
        self, slot: AgentSlot, session: PlatformSession, termination: Termination
    ) -> bool:
        """Before dispatch, the platform's replacement of a lost sandbox, once its process runs:
        the lost one's end is recorded, its bridge dropped, and the agent is attached anew."""
        assert slot.sandbox is not None
        try:
            successor = await session.replacement(slot.sandbox)
        except PlatformError as exc:
            await self._start_failed(slot, exc.reason, f"its replacement: {exc}")
            return False
        if successor is None or self.gate.closed:
            return False
        await self.record(termination_event(slot, termination, "startup"))
        if slot.holding is not None:
            slot.holding.cancel()
        slot.sandbox = successor
        return True

    # ---- teardown ------------------------------------------------------------------------------

    async def wind_down(self, session: PlatformSession) -> None:
        """Stop every agent (asked first, then signalled), record how each ended, harvest."""
        self.phase = "teardown"
        self.gate.close()
        self.progress.phase("stopping agents")
        started = [slot for slot in self.slots.values() if slot.sandbox is not None]
        term_grace_s = max((slot.descriptor.term_grace_s for slot in started), default=0.0)
        with anyio.move_on_after(STOP_GRACE_S + _ASK_TO_STOP_S + term_grace_s + 10):
            async with anyio.create_task_group() as tasks:
                for slot in started:
                    tasks.start_soon(self._stop, session, slot)
        with anyio.move_on_after(_RECORD_GRACE_S):
            for slot in started:
                await slot.recorded.wait()
        self.progress.phase("harvesting")
        harvested = self.progress.counter("agents harvested", len(started))
        try:
            for slot in started:
                await self._harvest(session, slot)
                harvested.advance()
        finally:
            harvested.close()
        for slot in self.slots.values():
            slot.released.set()

    async def _stop(self, session: PlatformSession, slot: AgentSlot) -> None:
        assert slot.sandbox is not None
        asks = slot.descriptor.ends_when_asked
        if asks and slot.attachment is not None and slot.sandbox.exit is None:
            with anyio.move_on_after(_ASK_TO_STOP_S):
                try:
                    await slot.descriptor.stop(slot.attachment.owner)
                except Exception:
                    pass  # the platform ends it below
        try:
            await session.stop(slot.sandbox, grace_s=STOP_GRACE_S if asks else 0.0)
        except PlatformError as exc:
            await self.record(PlatformFailed(reason=exc.reason, detail=str(exc)))

    async def _harvest(self, session: PlatformSession, slot: AgentSlot) -> None:
        assert slot.sandbox is not None
        try:
            items = await session.harvest(slot.sandbox, slot.descriptor.harvest)
        except PlatformError as exc:
            await self.record(PlatformFailed(reason=exc.reason, detail=str(exc)))
            return
        for item in items:
            common = {
                "agent": slot.name,
                "outcome": item.outcome,
                "sha256": item.sha256,
                "size": item.size,
                "artifact": item.artifact,
                "limit_bytes": item.limit_bytes,
                "detail": item.detail,
            }
            if item.kind == "workspace":
                await self.record(AgentWorkspaceFileHarvested(path=item.name, **common))
            else:
                await self.record(AgentRuntimeArtifact(kind=item.kind, name=item.name, **common))


def termination_event(slot: AgentSlot, termination: Termination, phase: RunPhase) -> Event:
    common = {"agent": slot.name, "runtime": slot.runtime, "phase": phase}
    if isinstance(termination, Completed):
        return AgentRuntimeCompleted(**common)
    if isinstance(termination, Failed):
        return AgentRuntimeFailed(
            **common, detail=termination.detail, exit_code=termination.exit_code
        )
    if isinstance(termination, Signaled):
        return AgentProcessSignaled(
            **common, signal=termination.signal, signal_name=termination.signal_name
        )
    assert isinstance(termination, Exited)
    return AgentProcessExited(**common, exit_code=termination.code)
