"""Driving one run through ``SocietyRun`` from the controller process.

On the local profile the ``society run`` process is also the run's worker: it polls a per-run
task queue for the workflow and its activities, submits the workflow, and waits for it. Its
``RunAuthority`` makes that worker serve only this submission and lets the driver accept only the
result its own ``execute`` proved (``submission``). An
interrupt cancels the workflow and waits for finalization and cleanup; a second one stops at
once (aborting the controller in-process and reaping directly).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import anyio
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)
from temporalio.service import RPCError
from temporalio.worker import Worker

from controller.errors import LifecycleError
from controller.lifecycle.activities import LifecycleActivities
from controller.lifecycle.run_files import read_ledger_state, run_directory
from controller.lifecycle.server import TemporalEndpoint
from controller.lifecycle.submission import ResultUnproven, RunAuthority
from controller.lifecycle.workflow import EXECUTE, PREPARE, SocietyRun
from controller.profiles import reap_here
from controller.program.process import PROGRAM_CANCEL_GRACE_S
from controller.run import Progress, RunRequest, RunResult, RunSpec
from controller.run.society import STOP_GRACE_S as AGENT_STOP_GRACE_S
from ledger.format import RECORDS

OutcomeName = Literal["ProgramFinished", "PlatformLost", "Interrupted"]


class RunRefused(LifecycleError):
    """The run could not start (a taken id, a bad module, ...): nothing ran, there is no outcome."""

    reason = "run-refused"


@dataclass(frozen=True, slots=True)
class RunReport:
    """What ``society run`` prints as its one JSON line."""

    outcome: OutcomeName
    exit: Literal["success", "failure", "interrupted"]
    run_id: str | None
    ledger_dir: str | None
    receipt_complete: bool
    records: int
    public_key: str | None
    cause: str | None = None
    usage: dict[str, Any] | None = None
    """Model tokens and cost per agent and in total (``RunResult.usage``)."""
    head_digest: str | None = None
    """SHA-256 of the ledger's last record line: with ``records`` and ``publicKey``, the receipt
    that ``society ledger verify --receipt`` binds the ledger to."""
    value: Any = None
    """What the program returned, as JSON (``RunResult.value``)."""
    value_note: str | None = None

    def line(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "exit": self.exit,
            "runId": self.run_id,
            "ledger": self.ledger_dir,
            "receipt": "complete" if self.receipt_complete else "incomplete",
            "records": self.records,
            "publicKey": self.public_key,
            "usage": self.usage,
            "headDigest": self.head_digest,
            "value": self.value,
            "valueNote": self.value_note,
        }

    @classmethod
    def from_result(cls, result: RunResult) -> RunReport:
        return cls(
            outcome=result.outcome,
            exit=result.exit,
            run_id=result.run_id,
            ledger_dir=result.ledger_dir,
            receipt_complete=result.receipt.complete,
            records=result.records,
            public_key=result.public_key,
            cause=result.cause,
            usage=result.usage,
            head_digest=result.receipt.head_digest,
            value=result.value,
            value_note=result.value_note,
        )

    @classmethod
    def from_artifacts(
        cls, artifact_root: Path, run_id: str, outcome: OutcomeName, cause: str | None = None
    ) -> RunReport:
        """A report for a run that returned no result: its ledger, read from disk."""
        ledger = read_ledger_state(run_directory(artifact_root, run_id))
        return cls(
            outcome=outcome,
            exit="interrupted" if outcome == "Interrupted" else "failure",
            run_id=run_id,
            ledger_dir=ledger.directory,
            receipt_complete=ledger.complete,
            records=ledger.records,
            public_key=ledger.public_key,
            cause=cause,
            usage=_usage_on_disk(ledger.directory),
            head_digest=ledger.head_digest,
        )


def _usage_on_disk(ledger_dir: str | None) -> dict[str, Any] | None:
    """The model usage the ledger records, as ``RunResult.usage`` reports it."""
    if ledger_dir is None:
        return None
    from controller.modelgateway.usage import usage_from_records

    try:
        with open(Path(ledger_dir) / RECORDS, "rb") as records:
            summary = usage_from_records(records)
    except OSError:
        return None
    return None if summary is None else summary.model_dump(mode="json", by_alias=True)


@dataclass
class Interrupts:
    """SIGINT/SIGTERM as the run sees them: the first asks to stop, the second insists."""

    signum: int | None = None
    first: anyio.Event = field(default_factory=anyio.Event)
    second: anyio.Event = field(default_factory=anyio.Event)
    _scopes: list[anyio.CancelScope] = field(default_factory=list)

    def __call__(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
            self.first.set()
            for scope in self._scopes:
                scope.cancel()
        else:
            self.second.set()

    @contextlib.contextmanager
    def cancelling(self) -> Iterator[anyio.CancelScope]:
        """A scope the first interrupt cancels (at once, if one already came)."""
        with anyio.CancelScope() as scope:
            if self.signum is not None:
                scope.cancel()
            self._scopes.append(scope)
            try:
                yield scope
            finally:
                self._scopes.remove(scope)


class RunDriver:
    """Runs the worker, submits ``SocietyRun`` and waits for it, honouring interrupts.

    ``spec`` is the ``run_spec`` the caller loaded from ``request.module_path``; the worker runs
    it and imports nothing a payload names.
    """

    def __init__(
        self,
        client: Client,
        endpoint: TemporalEndpoint,
        request: RunRequest,
        *,
        spec: RunSpec,
        progress: Progress,
        interrupts: Interrupts,
    ) -> None:
        self._client = client
        self._endpoint = endpoint
        self._request = request
        self._progress = progress
        self._interrupts = interrupts
        self._authority = RunAuthority(request)
        self._activities = LifecycleActivities(progress, authority=self._authority, spec=spec)

    async def drive(self) -> RunReport:
        request = self._request
        async with Worker(
            self._client,
            task_queue=task_queue(request.run_id),
            workflows=[SocietyRun],
            activities=[
                self._activities.prepare,
                self._activities.execute,
                self._activities.cleanup,
            ],
            # Cancellation reaches an activity with a heartbeat; send one at least every second.
            max_heartbeat_throttle_interval=timedelta(seconds=1),
            graceful_shutdown_timeout=timedelta(seconds=30),
        ):
            try:
                handle = await self._client.start_workflow(
                    SocietyRun.run,
                    self._authority.submission(),
                    id=request.run_id,
                    task_queue=task_queue(request.run_id),
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    # the first workflow task comes back to this worker, not to the task queue
                    request_eager_start=True,
                )
            except WorkflowAlreadyStartedError:
                raise RunRefused(
                    f"Temporal already has a run {request.run_id}", reason="run-id-taken"
                ) from None
            assert handle.first_execution_run_id is not None
            self._authority.started(handle.first_execution_run_id)
            ending = self._accepted(await self._wait(handle))
            if not isinstance(ending, RunResult):
                # The kernel finalizes the ledger before the worker stops; the SDK would log the
                # aborted activity's traceback as if it were a controller error.
                logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
                if ending is None:  # a second interrupt: at once, into whatever runs now
                    self._activities.abort()
                else:  # the workflow ended without this run's result: wind down, harvest
                    await self._activities.stop()
        root = Path(request.artifact_root)
        if isinstance(ending, RunResult):
            return RunReport.from_result(ending)
        if isinstance(ending, WorkflowFailureError):
            return self._report_failure(ending)
        self._progress.phase("cleanup: reaping the run's processes from the controller")
        await reap_here(request.run_id, root)
        self._progress.phase("cleanup: done")
        if isinstance(ending, ResultUnproven):
            return RunReport.from_artifacts(root, request.run_id, "PlatformLost", str(ending))
        if isinstance(ending, RPCError):
            cause = f"the Temporal server at {self._endpoint.address} is gone: {ending}"
            return RunReport.from_artifacts(root, request.run_id, "PlatformLost", cause)
        with anyio.move_on_after(5), contextlib.suppress(RPCError):
            await handle.terminate("stopped at once by a second interrupt; reaped locally")
        return RunReport.from_artifacts(root, request.run_id, "Interrupted")

    def _accepted(
        self, ending: dict[str, Any] | WorkflowFailureError | RPCError | None
    ) -> RunResult | ResultUnproven | WorkflowFailureError | RPCError | None:
        """A workflow result only if this process's ``execute`` proved it."""
        if not isinstance(ending, dict):
            return ending
        # ``export`` is cleanup's, outside the proof; this run's ledger is reported where it is.
        ending = {name: value for name, value in ending.items() if name != "export"}
        try:
            return self._authority.accept(ending)
        except ResultUnproven as refused:
            return refused

    async def _wait(
        self, handle: WorkflowHandle[Any, dict[str, Any]]
    ) -> dict[str, Any] | WorkflowFailureError | RPCError | None:
        return await wait_for_ending(handle, self._interrupts, self._progress)

    def _report_failure(self, error: WorkflowFailureError) -> RunReport:
        root, run_id = Path(self._request.artifact_root), self._request.run_id
        cause = error.cause
        if is_cancelled_exception(cause):
            return RunReport.from_artifacts(root, run_id, "Interrupted")
        if isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError):
            if cause.activity_type in (PREPARE, EXECUTE):
                # Whatever escapes the kernel escaped before the run started (a bad module, an
                # unknown profile, a ledger that exists): nothing ran, so there is no outcome.
                raise RunRefused(cause.cause.message, reason=cause.cause.type or "refused")
            cause = cause.cause
        return RunReport.from_artifacts(root, run_id, "PlatformLost", f"the run failed: {cause}")


async def wait_for_ending(
    handle: WorkflowHandle[Any, dict[str, Any]], interrupts: Interrupts, progress: Progress
) -> dict[str, Any] | WorkflowFailureError | RPCError | None:
    """The workflow's ending (a ``RunResult`` as JSON); None after a second interrupt.

    The first interrupt cancels the workflow and keeps waiting: its ledger is finalized and its
    cleanup runs before it ends.
    """
    ending: dict[str, Any] | WorkflowFailureError | RPCError | None = None
    async with anyio.create_task_group() as waiting:
        waiting.start_soon(_cancel_on_interrupt, handle, interrupts, progress)
        with anyio.CancelScope() as forced:
            waiting.start_soon(_cancel_scope_on, interrupts.second, forced)
            try:
                ending = await handle.result()
            except (WorkflowFailureError, RPCError) as error:
                ending = error
        waiting.cancel_scope.cancel()
    return ending


async def _cancel_on_interrupt(
    handle: WorkflowHandle[Any, Any], interrupts: Interrupts, progress: Progress
) -> None:
    await interrupts.first.wait()
    name = signal.Signals(interrupts.signum or signal.SIGINT).name
    progress.phase(
        f"{name}: stopping the run: the program gets up to {PROGRAM_CANCEL_GRACE_S:.0f} s to "
        f"return, then each agent up to {AGENT_STOP_GRACE_S:.0f} s to stop; the ledger is "
        f"finalized and every process reaped before exit (send {name} again to stop at once)"
    )
    with contextlib.suppress(RPCError):  # a lost server ends the wait with its own error
        await handle.cancel()


async def _cancel_scope_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def task_queue(run_id: str) -> str:
    return f"society-run-{run_id}"
