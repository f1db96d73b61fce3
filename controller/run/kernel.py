"""``Run.execute``: own the ledger, start the router, admit, start, gate, dispatch once, finalize.

One run, in order: the ledger is created (failure raises), ``RunStarted``; the router starts;
the platform admits the complete roster; every agent's sandbox starts, its bridge attaches and
its router session authenticates; the readiness gate passes (or the run is ``PlatformLost`` and
nothing of the program runs); the router dispatches and ``execute(ctx)`` runs once; agents are
stopped, their declared files and logs harvested, the sandboxes torn down; the ledger completes.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel

import controller.settings as settings
from controller.agents.roster import AgentHandle, Roster
from controller.events.run import (
    PlatformFailed,
    ProgramFailed,
    ProgramInterrupted,
    ProgramSucceeded,
    ReadinessGateFailed,
    ReadinessGatePassed,
    RosterAdmitted,
    RosterRefused,
    RunStarted,
)
from controller.run.context import CustomerEvents, LedgerView, RunContext
from controller.run.fork import Fork, ForkRequest
from controller.run.handover import check_handover
from controller.run.interruption import Interruption, relayed_cancellation
from controller.run.outcomes import Exit as ProgramExit
from controller.run.outcomes import (
    Failure,
    Outcome,
    PlatformCause,
    PlatformLost,
    ProgramFinished,
    Success,
)
from controller.run.platform import (
    AdmissionRefused,
    Platform,
    PlatformError,
    PlatformSession,
    RunPlacement,
)
from controller.run.progress import NO_PROGRESS, Progress
from controller.run.readiness import GateFailure, GateResult
from controller.run.runid import check_run_id, new_run_id
from controller.run.services import RunServices
from controller.run.society import Society
from controller.run.spec import RunSpec
from ledger.errors import LedgerError
from ledger.format import Provenance, ledger_directory
from ledger.records import LedgerReceipt
from ledger.signing import SigningKey
from ledger.writer import LedgerWriter, open_ledger_writer

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from controller.network.router import Router

DEFAULT_LEDGER_REF = "main"


def default_artifact_root() -> Path:
    return settings.current().artifact_root()


@dataclass(frozen=True, slots=True)
class _Interrupted:
    """The caller stopped the run; finalization happened and the cancellation is raised again."""


Result = ProgramExit | PlatformCause | _Interrupted


class Run:
    """Runs a ``RunSpec`` once: ``outcome = await Run.execute(run_spec)``."""

    @staticmethod
    async def execute(
        spec: RunSpec,
        *,
        platform: Platform,
        run_id: str | None = None,
        artifact_root: str | Path | None = None,
        seed: int | None = None,
        ledger_ref: str = DEFAULT_LEDGER_REF,
        progress: Progress | None = None,
        signing_key: SigningKey | None = None,
        signing_key_file: str | Path | None = None,
        signer_socket: str | Path | None = None,
        parameters: Mapping[str, Any] | None = None,
        fork: ForkRequest | None = None,
    ) -> Outcome:
        """Run ``spec``; returns ``ProgramFinished`` or ``PlatformLost``.

        Raises when the ledger cannot be created. On cancellation the run is finalized
        (``ProgramInterrupted``, teardown, harvest, completed ledger), then the cancellation
        propagates. ``platform`` runs the agents
        (``controller.platforms.local.LocalPlatform()`` for the local profile); the kernel never
        picks one itself.

        The ledger's key never enters this process (where ``execute`` runs): the ledger's signer
        process makes a fresh one, or reads the operator's ``signing_key_file``; or the signer
        listening at ``signer_socket`` holds it (a cluster's signer container). A
        ``signing_key`` object signs in this process instead.

        ``parameters`` set the spec's declared parameters (``RunSpecError`` for ones it does not
        take, raised before the ledger exists); ``fork`` makes the run a fork of its parent.
        """
        chosen = spec.parameters_from(parameters or {})
        check_handover(spec.agents)  # the operator's credentials and providers, as allowed
        run_id = check_run_id(run_id) if run_id is not None else new_run_id()
        seed = seed if seed is not None else secrets.randbits(32)
        root = (
            Path(artifact_root) if artifact_root is not None else default_artifact_root()
        ).resolve()
        metadata = {
            "seed": seed,
            "profile": platform.profile,
            "roster": {name: type(d).runtime for name, d in spec.agents.items()},
            "runtimeCatalogs": {
                type(d).runtime: d.events.tags for d in spec.agents.values() if len(d.events)
            },
        }
        async with relayed_cancellation() as interruption:
            async with open_ledger_writer(
                ledger_directory(root, run_id, ledger_ref),
                catalog=spec.catalog,
                definition_id=spec.id,
                run_id=run_id,
                provenance=Provenance.current(platform.profile),
                metadata=metadata,
                signing_key=signing_key,
                signing_key_file=signing_key_file,
                signer_socket=signer_socket,
            ) as writer:
                kernel = _Kernel(
                    spec,
                    platform,
                    writer,
                    root / run_id,
                    seed,
                    progress or NO_PROGRESS,
                    interruption,
                    _Variant(chosen, fork, _as_json(parameters or {})),
                )
                try:
                    result = await kernel.run()
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await kernel.finalize()
                    raise
                receipt = await kernel.finalize()
        # an interrupted run raised the caller's cancellation when the block above ended
        assert not isinstance(result, _Interrupted)
        if isinstance(result, PlatformCause):
            return PlatformLost(result, receipt, kernel.services.reports)
        if not receipt.complete:  # the ledger failed under the program: the evidence is partial
            failure = writer.failed
            detail = str(failure) if failure else "the ledger could not be completed"
            cause = PlatformCause("ledger-failed", detail, failure)
            return PlatformLost(cause, receipt, kernel.services.reports)
        return ProgramFinished(result, receipt, kernel.services.reports)


def _as_json(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as JSON data (what ``--set`` parsed; anything else as its text)."""
    return {str(key): json.loads(json.dumps(value, default=str)) for key, value in values.items()}


@dataclass(frozen=True, slots=True)
class _Variant:
    """What makes this run of the spec its own: its parameters, and the parent it forks."""

    parameters: BaseModel | None
    fork: ForkRequest | None
    set_values: Mapping[str, Any] = field(default_factory=dict)
    """What the operator set (``--set``), as set."""

    def recorded_parameters(self) -> dict[str, Any] | None:
        """The parameters as the run records them: the model's values, and over them what the
        operator set, as set (the model lives in the module, whose answer is not evidence)."""
        if self.parameters is None:
            return None
        return {**self.parameters.model_dump(mode="json"), **self.set_values}


class _Kernel:
    def __init__(
        self,
        spec: RunSpec,
        platform: Platform,
        writer: LedgerWriter,
        run_dir: Path,
        seed: int,
        progress: Progress,
        interruption: Interruption,
        variant: _Variant,
    ) -> None:
        self.spec = spec
        self.variant = variant
        self.platform = platform
        self.writer = writer
        self.run_dir = run_dir
        self.seed = seed
        self.progress = progress
        self.interruption = interruption
        self.society = Society(spec.agents, writer, progress)
        self.services = RunServices(spec.agents)
        self._interrupt_recorded = False
        self._lost: PlatformError | None = None

    async def finalize(self) -> LedgerReceipt:
        self.progress.phase("finalizing ledger")
        try:
            return await self.writer.complete()
        except LedgerError:
            return self.writer.receipt()

    async def run(self) -> Result:
        spec = self.spec
        record = self.society.record
        try:
            await self.writer.append(
                RunStarted(
                    definition_id=spec.id,
                    profile=self.platform.profile,
                    seed=self.seed,
                    roster=list(spec.agents),
                    runtimes={name: type(d).runtime for name, d in spec.agents.items()},
                    parameters=self.variant.recorded_parameters(),
                    fork=None if self.variant.fork is None else self.variant.fork.origin(),
                ),
                producer="kernel",
            )
            for evidence in self.platform.run_evidence():
                await self.writer.append(evidence, producer="kernel")
            from controller.network.router import Router

            self.progress.phase("starting router")
            tls = self.platform.router_tls(self.writer.run_id)
            local = self.platform.router_socket(self.run_dir)
            async with Router.serve(
                self.writer,
                host=self.platform.router_host,
                tls=tls,
                unix_socket=local,
                message_limits=self.spec.message_limits,
            ) as router:
                return await self._admit(router)
        except LedgerError as exc:
            return PlatformCause("ledger-failed", str(exc), exc)
        except Exception as raised:
            cause = _sole_cause(raised)
            reason = str(getattr(cause, "reason", None) or "platform-error")
            detail = f"{type(cause).__name__}: {cause}"
            await record(PlatformFailed(reason=reason, detail=detail))
            return PlatformCause(reason, detail, cause)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._interrupted(_interruption(exc))
            raise

    async def _admit(self, router: Router) -> Result:
        self.progress.phase("admitting roster")
        try:
            admission = self.platform.admit(self.spec.agents)
        except AdmissionRefused as refused:
            return await self._refused(refused)
        credentials = {name: router.register(name, kind="agent") for name in self.spec.agents}
        placement = RunPlacement(
            run_id=self.writer.run_id,
            run_dir=self.run_dir,
            seed=self.seed,
            router_url=self.platform.agent_router_url(router.url),
        )
        # Services (a model gateway) start before any agent and stop after every agent ended.
        async with (
            self.services.open(
                placement,
                host=self.platform.router_host,
                ledger=self.writer,
                start_local_model=self.platform.local_model(),
                progress=self.progress,
            ),
            self.platform.session(placement) as session,
        ):
            self.society.grant(self.services)
            try:
                with self.interruption.interruptible():  # a cluster queue may hold it here
                    admission = await session.admit(admission)
            except AdmissionRefused as refused:
                return await self._refused(refused)
            if self.interruption.reason is not None:
                return await self._interrupted(self.interruption.reason)
            await self.society.record(
                RosterAdmitted(
                    requests=list(admission.requests),
                    requested=admission.requested,
                    capacity=admission.capacity,
                    queue=admission.queue,
                )
            )
            async with anyio.create_task_group() as tasks:
                try:
                    with anyio.CancelScope() as loss:
                        tasks.start_soon(self._watch_loss, session, loss)
                        result = await self._society(router, session, tasks, credentials)
                    if loss.cancelled_caught and self._lost is not None:
                        result = await self._platform_lost(self._lost)
                except BaseException as exc:
                    if not isinstance(exc, Exception):
                        with anyio.CancelScope(shield=True):
                            await self._interrupted(_interruption(exc))
                    raise
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.society.wind_down(session)
                    tasks.cancel_scope.cancel()  # keepers still attaching, watchers of the unborn
        return result

    async def _refused(self, refused: AdmissionRefused) -> PlatformCause:
        a = refused.admission
        await self.society.record(
            RosterRefused(
                reason=refused.reason,
                detail=str(refused),
                requests=list(a.requests),
                requested=a.requested,
                capacity=a.capacity,
            )
        )
        return PlatformCause(refused.reason, str(refused), refused)

    async def _watch_loss(self, session: PlatformSession, scope: anyio.CancelScope) -> None:
        """Stop the gate or the program when the platform loses the run's capacity."""
        self._lost = await session.lost()
        scope.cancel()

    async def _platform_lost(self, error: PlatformError) -> PlatformCause:
        await self.society.record(PlatformFailed(reason=error.reason, detail=str(error)))
        return PlatformCause(error.reason, str(error), error)

    async def _society(
        self,
        router: Router,
        session: PlatformSession,
        tasks: TaskGroup,
        credentials: dict[str, Any],
    ) -> Result:
        society = self.society
        self.progress.phase("starting agents")
        counters = society.start(router, session, tasks, credentials)
        self.progress.phase("waiting for readiness")
        try:
            with self.interruption.interruptible():
                gate = await society.gate.wait()
        finally:
            for counter in counters:
                counter.close()
        if self.interruption.reason is not None:
            return await self._interrupted(self.interruption.reason)
        dead = society.dead_at_the_gate()
        if gate.passed and dead:
            failure = GateFailure(
                dead[0], "exited-before-dispatch", "its process ended at the gate"
            )
            gate = GateResult(False, gate.ready, (failure,), gate.elapsed_ms)
        if not gate.passed:
            return await self._gate_failed(gate)
        await society.record(
            ReadinessGatePassed(agents=list(gate.ready), elapsed_ms=gate.elapsed_ms)
        )
        await router.dispatch()
        society.phase = "program"
        self.progress.phase("running program")
        self.progress.program_started(self.writer.directory)
        context = RunContext(
            agents=Roster(
                {
                    slot.name: AgentHandle(
                        name=slot.name,
                        runtime=slot.runtime,
                        agent=slot.participant,
                        owner=slot.attachment.owner,
                        termination=slot.attachment.termination,
                    )
                    for slot in society.slots.values()
                    if slot.attachment is not None
                }
            ),
            network=router.network,
            events=CustomerEvents(self.writer, self.spec.events),
            ledger=LedgerView(self.writer),
            parameters=self.variant.parameters,
            fork=self._fork(router),
        )
        try:
            with self.interruption.interruptible():
                return await self._program(context)
        finally:
            if context.fork is not None:
                context.fork.release()  # a held fork point never entered holds nothing past here
        return await self._interrupted(self.interruption.reason or "cancelled")

    def _fork(self, router: Router) -> Fork | None:
        request = self.variant.fork
        return None if request is None else Fork(request, self.variant.parameters, router.commits)

    async def _program(self, context: RunContext) -> ProgramExit:
        started = time.monotonic()
        try:
            value = await self.spec.execute(context)
        except Exception as exc:
            reason = str(getattr(exc, "reason", None) or "program-raised")
            detail = f"{type(exc).__name__}: {exc}"
            await self.society.record(
                ProgramFailed(
                    reason=reason,
                    error_type=type(exc).__qualname__,
                    detail=detail,
                    elapsed_ms=(time.monotonic() - started) * 1000,
                )
            )
            return Failure(exc, reason, detail)
        success = Success.of(value)
        await self.society.record(
            ProgramSucceeded(
                elapsed_ms=(time.monotonic() - started) * 1000,
                value=success.kept,
                value_note=success.note,
            )
        )
        return success

    async def _gate_failed(self, gate: GateResult) -> PlatformCause:
        failed = [failure.agent for failure in gate.failures]
        failed += [
            name for name in self.spec.agents if name not in gate.ready and name not in failed
        ]
        first = gate.failures[0] if gate.failures else None
        reason = first.reason if first else "not-ready"
        await self.society.record(
            ReadinessGateFailed(failed=failed, ready=list(gate.ready), reason=reason)
        )
        detail = f"agent {first.agent}: {first.detail}" if first else "not every agent became ready"
        return PlatformCause("readiness-gate-failed", detail)

    async def _interrupted(self, reason: str) -> _Interrupted:
        """Record the caller's interruption once, before the teardown evidence."""
        if not self._interrupt_recorded:
            self._interrupt_recorded = True
            self.progress.phase(f"interrupted ({reason}): finalizing")
            await self.society.record(
                ProgramInterrupted(reason=reason, dispatched=self.society.dispatched)
            )
        return _Interrupted()


def _interruption(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "keyboard-interrupt"
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "cancelled"
    return type(exc).__name__


def _sole_cause(exc: Exception) -> Exception:
    """The one error inside task groups' exception groups (their own message names no cause)."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
