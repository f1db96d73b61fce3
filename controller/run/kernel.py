"""``Run.execute``: own the ledger, start the router, admit, start, gate, dispatch once, finalize.

One run, in order: the ledger is created (failure raises), ``RunStarted``; the router starts;
the platform admits the complete roster; every agent's sandbox starts, its bridge attaches and
its router session authenticates; the readiness gate passes (or the run is ``ClusterLost`` and
nothing of the program runs); the router dispatches and ``execute(ctx)`` runs once; agents are
stopped, their declared files and logs harvested, the sandboxes torn down; the ledger completes.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from controller.agents.roster import AgentHandle, Roster
from controller.agents.runtime import Attachment, RuntimeDescriptor, RuntimeDescriptorError
from controller.agents.termination import (
    Completed,
    Exited,
    Failed,
    Signaled,
    Termination,
)
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
    ProgramFailed,
    ProgramInterrupted,
    ProgramSucceeded,
    ReadinessGateFailed,
    ReadinessGatePassed,
    RosterAdmitted,
    RosterRefused,
    RunPhase,
    RunStarted,
)
from controller.run.context import CustomerEvents, LedgerView, RunContext
from controller.run.outcomes import ClusterCause, ClusterLost, Failure, Outcome, ProgramFinished
from controller.run.outcomes import Exit as ProgramExit
from controller.run.outcomes import Success
from controller.run.platform import (
    AdmissionRefused,
    AgentLaunch,
    Platform,
    PlatformError,
    PlatformSession,
    RunPlacement,
    Sandbox,
)
from controller.run.progress import NO_PROGRESS, Progress
from controller.run.readiness import GateFailure, GateResult, ReadinessGate
from controller.run.runid import check_run_id, new_run_id
from controller.run.spec import RunSpec
from ledger.errors import LedgerError
from ledger.events import Event
from ledger.format import Provenance, ledger_directory
from ledger.signing import SigningKey
from ledger.writer import LedgerWriter, open_ledger_writer

KERNEL = "kernel"
DEFAULT_LEDGER_REF = "main"
ARTIFACT_ROOT_VARIABLE = "SOCIETY_ARTIFACT_ROOT"
STOP_GRACE_S = 5.0
"""How long an agent may take to end by itself at teardown before it is signalled."""
_RECORD_GRACE_S = 3.0


def default_artifact_root() -> Path:
    return Path(os.environ.get(ARTIFACT_ROOT_VARIABLE) or "artifacts")


class Run:
    """Runs a ``RunSpec`` once: ``outcome = await Run.execute(run_spec)``."""

    @staticmethod
    async def execute(
        spec: RunSpec,
        *,
        platform: Platform | None = None,
        run_id: str | None = None,
        artifact_root: str | Path | None = None,
        seed: int | None = None,
        ledger_ref: str = DEFAULT_LEDGER_REF,
        progress: Progress | None = None,
        signing_key: SigningKey | None = None,
    ) -> Outcome:
        """Run ``spec``; returns ``ProgramFinished`` or ``ClusterLost``.

        Raises when the ledger cannot be created. On cancellation the run is finalized
        (``ProgramInterrupted``, teardown, completed ledger) and the cancellation propagates.
        """
        if platform is None:
            from controller.platform.local import LocalPlatform

            platform = LocalPlatform()
        run_id = check_run_id(run_id) if run_id is not None else new_run_id()
        seed = seed if seed is not None else secrets.randbits(32)
        root = Path(artifact_root) if artifact_root is not None else default_artifact_root()
        root = root.resolve()
        metadata = {
            "seed": seed,
            "profile": platform.profile,
            "roster": {name: type(d).runtime for name, d in spec.agents.items()},
            "runtimeCatalogs": {
                type(d).runtime: d.events.tags for d in spec.agents.values() if len(d.events)
            },
        }
        async with open_ledger_writer(
            ledger_directory(root, run_id, ledger_ref),
            catalog=spec.catalog,
            definition_id=spec.id,
            run_id=run_id,
            provenance=Provenance.current(platform.profile),
            metadata=metadata,
            signing_key=signing_key,
        ) as writer:
            kernel = _Kernel(spec, platform, writer, root / run_id, seed, progress or NO_PROGRESS)
            try:
                result = await kernel.run()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await kernel.finalize()
                raise
            receipt = await kernel.finalize()
            if isinstance(result, ClusterCause):
                return ClusterLost(result, receipt)
            return ProgramFinished(result, receipt)


@dataclass(eq=False)
class _Slot:
    """One roster agent's way through the run."""

    name: str
    descriptor: RuntimeDescriptor
    sandbox: Sandbox | None = None
    attachment: Attachment[Any] | None = None
    participant: Any = None
    requested_at: float = 0.0
    released: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)
    """Set once the agent is ready, failed to start, or its termination was recorded."""
    recorded: anyio.Event = field(default_factory=anyio.Event)
    """Set once its termination is in the ledger (or it never started)."""


class _Kernel:
    def __init__(
        self,
        spec: RunSpec,
        platform: Platform,
        writer: LedgerWriter,
        run_dir: Path,
        seed: int,
        progress: Progress,
    ) -> None:
        self.spec = spec
        self.platform = platform
        self.writer = writer
        self.run_dir = run_dir
        self.seed = seed
        self.progress = progress
        self.phase: RunPhase = "startup"
        self.dispatched = False
        self.slots = {name: _Slot(name, d) for name, d in spec.agents.items()}
        self.gate = ReadinessGate(self.slots)
        self._interrupt_recorded = False

    async def record(self, event: Event) -> None:
        await self.writer.append(event, producer=KERNEL)

    async def finalize(self) -> Any:
        self.progress.phase("finalizing ledger")
        try:
            return await self.writer.complete()
        except LedgerError:
            return self.writer.receipt()

    async def run(self) -> ProgramExit | ClusterCause:
        spec = self.spec
        try:
            await self.record(
                RunStarted(
                    definition_id=spec.id,
                    profile=self.platform.profile,
                    seed=self.seed,
                    roster=list(spec.agents),
                    runtimes={name: type(d).runtime for name, d in spec.agents.items()},
                )
            )
            from controller.network.router import Router

            self.progress.phase("starting router")
            async with Router.serve(self.writer, host=self.platform.router_host) as router:
                return await self._admitted(router)
        except LedgerError as exc:
            return ClusterCause("ledger-failed", str(exc), exc)
        except Exception as exc:
            reason = str(getattr(exc, "reason", None) or "platform-error")
            return await self._lost(reason, f"{type(exc).__name__}: {exc}", exc)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._interrupted(exc)
            raise

    async def _interrupted(self, exc: BaseException) -> None:
        """Record the caller's interruption once, before teardown evidence when possible."""
        if not self._interrupt_recorded:
            self._interrupt_recorded = True
            reason = _interruption(exc)
            self.progress.phase(f"interrupted ({reason}): finalizing")
            await self._safe_record(ProgramInterrupted(reason=reason, dispatched=self.dispatched))

    async def _admitted(self, router: Any) -> ProgramExit | ClusterCause:
        self.progress.phase("admitting roster")
        try:
            admission = self.platform.admit(self.spec.agents)
        except AdmissionRefused as refused:
            a = refused.admission
            await self.record(
                RosterRefused(
                    reason=refused.reason,
                    detail=str(refused),
                    requests=list(a.requests),
                    requested=a.requested,
                    capacity=a.capacity,
                )
            )
            return ClusterCause(refused.reason, str(refused), refused)
        await self.record(
            RosterAdmitted(
                requests=list(admission.requests),
                requested=admission.requested,
                capacity=admission.capacity,
            )
        )
        credentials = {name: router.register(name, kind="agent") for name in self.slots}
        placement = RunPlacement(
            run_id=self.writer.run_id,
            run_dir=self.run_dir,
            seed=self.seed,
            router_url=self.platform.agent_router_url(router.url),
        )
        async with self.platform.session(placement) as session:
            async with anyio.create_task_group() as tasks:
                try:
                    return await self._society(router, session, tasks, credentials)
                except BaseException as exc:
                    if not isinstance(exc, Exception):
                        with anyio.CancelScope(shield=True):
                            await self._interrupted(exc)
                    raise
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._wind_down(session)
                    tasks.cancel_scope.cancel()  # keepers still attaching, watchers of the unborn

    async def _society(
        self,
        router: Any,
        session: PlatformSession,
        tasks: TaskGroup,
        credentials: Mapping[str, Any],
    ) -> ProgramExit | ClusterCause:
        self.progress.phase("starting agents")
        started = self.progress.counter("agents started", len(self.slots))
        readied = self.progress.counter("agents ready", len(self.slots))
        try:
            for slot in self.slots.values():
                launch = AgentLaunch(
                    name=slot.name,
                    descriptor=slot.descriptor,
                    router_token=credentials[slot.name].token,
                    bridge_token=secrets.token_urlsafe(32),
                )
                slot.participant = credentials[slot.name].participant
                tasks.start_soon(self._keep, slot, launch, session, router, tasks, started, readied)
            self.progress.phase("waiting for readiness")
            gate = await self.gate.wait()
        finally:
            started.close()
            readied.close()
        if gate.passed:
            gate = self._still_alive(gate)
        if not gate.passed:
            return await self._gate_failed(gate)
        await self.record(ReadinessGatePassed(agents=list(gate.ready), elapsed_ms=gate.elapsed_ms))
        await router.dispatch()
        self.dispatched = True
        self.phase = "program"
        self.progress.phase("running program")
        context = RunContext(
            agents=Roster(
                {
                    slot.name: AgentHandle(
                        name=slot.name,
                        runtime=type(slot.descriptor).runtime,
                        agent=slot.participant,
                        gateway=slot.attachment.gateway,
                        termination=slot.attachment.termination,
                    )
                    for slot in self.slots.values()
                    if slot.attachment is not None
                }
            ),
            network=router.network,
            events=CustomerEvents(self.writer, self.spec.events),
            ledger=LedgerView(self.writer),
        )
        return await self._program(context)

    def _still_alive(self, gate: GateResult) -> GateResult:
        """The gate's last check: every process still runs at the moment of dispatch."""
        for slot in self.slots.values():
            if slot.sandbox is None or slot.sandbox.exit is not None:
                failure = GateFailure(slot.name, "exited-before-dispatch", "ended at the gate")
                return replace(gate, passed=False, failures=(failure,))
        return gate

    async def _program(self, context: RunContext) -> ProgramExit:
        started = time.monotonic()
        try:
            value = await self.spec.execute(context)
        except Exception as exc:
            elapsed = (time.monotonic() - started) * 1000
            reason = str(getattr(exc, "reason", None) or "program-raised")
            detail = f"{type(exc).__name__}: {exc}"
            await self.record(
                ProgramFailed(
                    reason=reason,
                    error_type=type(exc).__qualname__,
                    detail=detail,
                    elapsed_ms=elapsed,
                )
            )
            return Failure(exc, reason, detail)
        await self.record(ProgramSucceeded(elapsed_ms=(time.monotonic() - started) * 1000))
        return Success(value)

    async def _gate_failed(self, gate: GateResult) -> ClusterCause:
        failed = [failure.agent for failure in gate.failures]
        failed += [name for name in self.slots if name not in gate.ready and name not in failed]
        first = gate.failures[0] if gate.failures else None
        reason = first.reason if first else "not-ready"
        await self.record(ReadinessGateFailed(failed=failed, ready=list(gate.ready), reason=reason))
        detail = f"agent {first.agent}: {first.detail}" if first else "not every agent became ready"
        return ClusterCause("readiness-gate-failed", detail)

    async def _lost(self, reason: str, detail: str, error: BaseException | None) -> ClusterCause:
        await self._safe_record(PlatformFailed(reason=reason, detail=detail))
        return ClusterCause(reason, detail, error)

    async def _safe_record(self, event: Event) -> None:
        try:
            await self.record(event)
        except LedgerError:
            pass

    # ---- one agent ---------------------------------------------------------------------------

    async def _keep(
        self,
        slot: _Slot,
        launch: AgentLaunch,
        session: PlatformSession,
        router: Any,
        tasks: TaskGroup,
        started: Any,
        readied: Any,
    ) -> None:
        """Start, attach and authenticate one agent, then hold its bridge until released."""
        descriptor = slot.descriptor
        slot.requested_at = time.monotonic()
        try:
            slot.sandbox = await session.start(launch)
        except PlatformError as exc:
            await self._start_failed(slot, exc.reason, str(exc))
            slot.recorded.set()
            return
        except Exception as exc:
            await self._start_failed(slot, "spawn-failed", f"{type(exc).__name__}: {exc}")
            slot.recorded.set()
            return
        started.advance()
        tasks.start_soon(self._watch, slot)
        try:
            with anyio.fail_after(descriptor.ready_timeout_s) as readiness:
                async with descriptor.attach(slot.sandbox.access) as attachment:
                    slot.attachment = attachment
                    await router.wait_authenticated(slot.name)
                    await self._ready(slot)
                    readied.advance()
                    slot.settled.set()
                    readiness.deadline = math.inf  # ready: hold the bridge until released
                    await slot.released.wait()
        except RuntimeDescriptorError as exc:
            await self._start_failed(slot, exc.reason, str(exc))
        except TimeoutError:
            await self._start_failed(
                slot,
                "ready-timeout",
                f"not ready within {descriptor.ready_timeout_s:g} s "
                f"(bridge {'attached' if slot.attachment else 'not attached'}, router session "
                f"{'authenticated' if router.is_authenticated(slot.name) else 'not authenticated'})",
            )
        except Exception as exc:
            await self._start_failed(slot, "attach-failed", f"{type(exc).__name__}: {exc}")
        finally:
            slot.settled.set()

    async def _ready(self, slot: _Slot) -> None:
        descriptor = slot.descriptor
        assert slot.sandbox is not None and slot.attachment is not None
        if slot.sandbox.exit is not None or slot.attachment.termination.done:
            raise RuntimeDescriptorError(
                f"agent {slot.name} ended before it was ready", reason="exited-before-ready"
            )
        await self.record(
            AgentRuntimeReady(
                agent=slot.name,
                runtime=type(descriptor).runtime,
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
            )
        )
        self.gate.ready(slot.name)

    async def _start_failed(self, slot: _Slot, reason: str, detail: str) -> None:
        if self.dispatched:
            return
        if self.gate.fail(slot.name, reason, detail):
            await self._safe_record(
                AgentRuntimeStartFailed(
                    agent=slot.name,
                    runtime=type(slot.descriptor).runtime,
                    reason=reason,
                    detail=detail,
                )
            )

    async def _watch(self, slot: _Slot) -> None:
        """Record how the agent ended, whenever it ends; before dispatch it fails the gate."""
        assert slot.sandbox is not None
        try:
            ended = await slot.sandbox.access.exit
            phase = self.phase
            termination: Termination = ended.plain()
            if slot.attachment is None:
                with anyio.move_on_after(0.5):  # an attach racing the exit
                    await slot.settled.wait()
            if slot.attachment is not None:
                with anyio.move_on_after(_RECORD_GRACE_S):
                    termination = await slot.attachment.termination
            if not self.dispatched:
                await self._start_failed(
                    slot, "exited-before-dispatch", f"ended before dispatch: {termination}"
                )
            await self._safe_record(self._termination_event(slot, termination, phase))
        finally:
            slot.recorded.set()

    def _termination_event(self, slot: _Slot, termination: Termination, phase: RunPhase) -> Event:
        common = {"agent": slot.name, "runtime": type(slot.descriptor).runtime, "phase": phase}
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

    # ---- teardown ------------------------------------------------------------------------------

    async def _wind_down(self, session: PlatformSession) -> None:
        """Stop every agent (asked first, then signalled), record how each ended, harvest."""
        self.phase = "teardown"
        self.gate.close()
        self.progress.phase("stopping agents")
        slots = [slot for slot in self.slots.values() if slot.sandbox is not None]
        with anyio.move_on_after(STOP_GRACE_S + 10):
            async with anyio.create_task_group() as tasks:
                for slot in slots:
                    tasks.start_soon(self._stop, session, slot)
        with anyio.move_on_after(_RECORD_GRACE_S):
            for slot in slots:
                await slot.recorded.wait()
        self.progress.phase("harvesting")
        harvested = self.progress.counter("agents harvested", len(slots))
        try:
            for slot in slots:
                await self._harvest(session, slot)
                harvested.advance()
        finally:
            harvested.close()
        for slot in self.slots.values():
            slot.released.set()

    async def _stop(self, session: PlatformSession, slot: _Slot) -> None:
        assert slot.sandbox is not None
        if slot.attachment is not None and slot.sandbox.exit is None:
            with anyio.move_on_after(2.0):
                try:
                    await slot.descriptor.stop(slot.attachment.gateway)
                except Exception:
                    pass  # the platform ends it below
        try:
            await session.stop(slot.sandbox, grace_s=STOP_GRACE_S)
        except PlatformError as exc:
            await self._safe_record(PlatformFailed(reason=exc.reason, detail=str(exc)))

    async def _harvest(self, session: PlatformSession, slot: _Slot) -> None:
        assert slot.sandbox is not None
        try:
            items = await session.harvest(slot.sandbox, slot.descriptor.harvest)
        except PlatformError as exc:
            await self._safe_record(PlatformFailed(reason=exc.reason, detail=str(exc)))
            return
        for item in items:
            fields = {
                "agent": slot.name,
                "outcome": item.outcome,
                "sha256": item.sha256,
                "size": item.size,
                "artifact": item.artifact,
                "limit_bytes": item.limit_bytes,
                "detail": item.detail,
            }
            if item.kind == "workspace":
                await self._safe_record(AgentWorkspaceFileHarvested(path=item.name, **fields))
            else:
                await self._safe_record(
                    AgentRuntimeArtifact(kind=item.kind, name=item.name, **fields)
                )


def _interruption(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "keyboard-interrupt"
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "cancelled"
    return type(exc).__name__
