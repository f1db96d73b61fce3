"""Submitting a run to a run worker that is not this process: a cluster's, on its task queue.

``society run MODULE --task-queue QUEUE`` (``--profile gke`` implies the chart's
``society-runs``) runs no worker of its own. It starts ``SocietyRun`` on QUEUE with the module's
content (``module_source``; the worker never reads a path of this machine), shows the worker's
progress (the current activity and the phase ``execute`` heartbeats) and waits. Ctrl-C cancels
the workflow, and the worker finalizes the ledger, cleans up and exports before it ends; a
second Ctrl-C stops waiting at once and leaves the workflow's cancellation to the worker.
The result line's ledger is where the worker exported it (``gs://BUCKET/<run id>/ledger/main``),
which the workflow's result carries (``export``, from cleanup).

Trust: a cluster's worker holds no per-run key, so nothing in the result proves which worker
produced it (``submission`` proves that only for the worker inside ``society run``). This mode
accepts the workflow's result because the Temporal namespace authenticates its clients: only a
client holding the namespace's mTLS certificate or API key (``TEMPORAL_TLS_DIR``,
``TEMPORAL_API_KEY``) can poll its task queues and complete their tasks, so whoever answered is
a worker the namespace's owner admitted. A Temporal without client credentials (a dev server,
kind's in-cluster one) gives no such assurance: any process that reaches it could answer. There
this mode is refused (``temporal-unauthenticated``) unless the caller says it trusts everything
that reaches that server (``allow_unauthenticated``, the CLI's ``--insecure-temporal``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
from pydantic import ValidationError
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)
from temporalio.service import RPCError

from controller.lifecycle import control
from controller.lifecycle.driver import (
    Interrupts,
    RunRefused,
    RunReport,
    wait_for_ending,
)
from controller.lifecycle.models import LedgerExported
from controller.lifecycle.server import (
    API_KEY_ENV,
    TLS_DIR_ENV,
    TemporalEndpoint,
    TemporalUnavailable,
    connection_credentials,
)
from controller.lifecycle.workflow import CLEANUP, EXECUTE, PREPARE
from controller.run import Progress, RunRequest, RunResult

FOLLOW_EVERY_S = 1.0
"""How often the submitter asks Temporal for the worker's current step and phase."""


def check_authenticated(endpoint: TemporalEndpoint, *, allow_unauthenticated: bool) -> None:
    """Refuse (``RunRefused``) to accept an unproven result from a Temporal that authenticates no
    client, unless the caller allows it."""
    if allow_unauthenticated or connection_credentials():
        return
    raise RunRefused(
        f"the Temporal at {endpoint.address} is reached without client credentials, so any "
        f"process that reaches it could answer as the worker, and a cluster worker's result "
        f"carries no proof of origin",
        reason="temporal-unauthenticated",
        next_step=f"set {TLS_DIR_ENV} (a directory with tls.crt and tls.key) or {API_KEY_ENV} "
        "for your Temporal namespace; or, if only processes you trust reach this server (a dev "
        "server of your own), pass --insecure-temporal",
    )


class SubmittedRun:
    """Starts ``SocietyRun`` on ``task_queue`` for a worker elsewhere, and waits for it.

    ``require_export``: a result without an export is a failure (GKE: the worker's scratch goes
    with its pod, so a ledger that was not exported is not retained).
    """

    def __init__(
        self,
        client: Client,
        endpoint: TemporalEndpoint,
        request: RunRequest,
        *,
        task_queue: str,
        progress: Progress,
        interrupts: Interrupts,
        require_export: bool,
    ) -> None:
        self._client = client
        self._endpoint = endpoint
        self._request = request
        self._task_queue = task_queue
        self._progress = progress
        self._interrupts = interrupts
        self._require_export = require_export

    async def drive(self) -> RunReport:
        request = self._request
        try:
            handle: WorkflowHandle[Any, dict[str, Any]] = await self._client.start_workflow(
                "SocietyRun",
                request.model_dump(mode="json"),
                id=request.run_id,
                task_queue=self._task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                result_type=dict[str, Any],
            )
        except WorkflowAlreadyStartedError:
            raise RunRefused(
                f"Temporal already has a run {request.run_id}", reason="run-id-taken"
            ) from None
        except RPCError as error:
            raise RunRefused(
                f"the Temporal at {self._endpoint.address} refused to start the run: {error}",
                reason="temporal-refused",
                next_step=f"check that the credentials ({TLS_DIR_ENV} or {API_KEY_ENV}) may "
                f"start workflows in namespace {self._endpoint.namespace}",
            ) from None
        self._progress.phase(
            f"submitted to task queue {self._task_queue}; this process runs no worker"
        )
        async with anyio.create_task_group() as following:
            following.start_soon(self._follow)
            ending = await wait_for_ending(handle, self._interrupts, self._progress)
            following.cancel_scope.cancel()
        if isinstance(ending, dict):
            return result_report(
                ending,
                request.run_id,
                task_queue=self._task_queue,
                require_export=self._require_export,
                progress=self._progress,
            )
        if isinstance(ending, WorkflowFailureError):
            report = self._report_failure(ending)
            with contextlib.suppress(RPCError, ValidationError):
                exported = await self._exported_by_cleanup(handle)
                if exported is not None:  # what the run left was exported: report it there
                    self._progress.phase(f"ledger exported to {exported.url}")
                    report = _replace(
                        report,
                        report.outcome,
                        report.cause,
                        ledger=exported.ledger,
                        complete=exported.complete,
                        records=exported.signed_records,
                    )
            return report
        if isinstance(ending, RPCError):
            cause = f"the Temporal server at {self._endpoint.address} is gone: {ending}"
            return self._report("PlatformLost", cause)
        return self._report(
            "Interrupted",
            f"stopped waiting at once; the workflow's cancellation is left to the worker on "
            f"{self._task_queue} (watch workflow {request.run_id} in the Temporal UI)",
        )

    async def _follow(self) -> None:
        """Print the worker's step and phase as Temporal reports them, each change once."""
        shown: tuple[Any, Any] | None = None
        waiting_said = False
        while True:
            with contextlib.suppress(RPCError, TemporalUnavailable):
                live = await control.live_status(self._client, self._endpoint, self._request.run_id)
                if live is not None:
                    now = (live.get("step"), live.get("phase"))
                    if now[0] is None and not waiting_said and live["workflow"] == "running":
                        waiting_said = await self._say_if_no_worker()
                    elif now != shown and now[0] is not None:
                        shown = now
                        detail = f": {now[1]}" if now[1] else ""
                        self._progress.phase(f"worker: {now[0]}{detail}")
            await anyio.sleep(FOLLOW_EVERY_S)

    async def _say_if_no_worker(self) -> bool:
        """Say so when no worker polls the task queue (the run waits until one does)."""
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

        described = await self._client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self._endpoint.namespace,
                task_queue=TaskQueue(name=self._task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        if described.pollers:
            return False
        self._progress.phase(
            f"no worker polls task queue {self._task_queue} yet; the run waits for one (GKE: "
            f"`kubectl -n society-system get deploy society-run-worker`)"
        )
        return True

    async def _exported_by_cleanup(self, handle: WorkflowHandle[Any, Any]) -> LedgerExported | None:
        """Where a workflow that returned no result (cancelled, failed) had its run exported:
        the result of its completed cleanup activity, from the workflow's history."""
        cleanups: set[int] = set()
        exported: LedgerExported | None = None
        async for event in handle.fetch_history_events():
            if event.HasField("activity_task_scheduled_event_attributes"):
                scheduled = event.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name == CLEANUP:
                    cleanups.add(event.event_id)
            elif event.HasField("activity_task_completed_event_attributes"):
                completed = event.activity_task_completed_event_attributes
                if completed.scheduled_event_id in cleanups and completed.result.payloads:
                    [value] = await self._client.data_converter.decode(completed.result.payloads)
                    if value is not None:
                        exported = LedgerExported.model_validate(value)
        return exported

    def _report_failure(self, error: WorkflowFailureError) -> RunReport:
        cause = error.cause
        if is_cancelled_exception(cause):
            return self._report("Interrupted", None)
        if isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError):
            if cause.activity_type in (PREPARE, EXECUTE):
                # What escapes the kernel escaped before the run started: nothing ran.
                raise RunRefused(cause.cause.message, reason=cause.cause.type or "refused")
            cause = cause.cause
        return self._report("PlatformLost", f"the run failed on the worker: {cause}")

    def _report(self, outcome: Any, cause: str | None) -> RunReport:
        return _no_result(self._request.run_id, outcome, cause)


def result_report(
    document: dict[str, Any],
    run_id: str,
    *,
    task_queue: str,
    require_export: bool,
    progress: Progress,
) -> RunReport:
    """The report for the workflow's result: its ledger where the worker exported it; a result
    that is malformed, names another run, or (``require_export``) was not exported, is a
    failure."""
    fields = {name: value for name, value in document.items() if name != "export"}
    try:
        result = RunResult.model_validate(fields)
        export = (
            None
            if document.get("export") is None
            else LedgerExported.model_validate(document["export"])
        )
    except ValidationError as error:
        return _no_result(run_id, "PlatformLost", f"result-malformed: the worker's result: {error}")
    if result.run_id != run_id:
        return _no_result(
            run_id, "PlatformLost", f"result-foreign: the result names {result.run_id}"
        )
    report = RunReport.from_result(result)
    if export is not None:
        progress.phase(f"ledger exported to {export.url}")
        if export.complete != result.receipt.complete:
            cause = (
                f"export-mismatch: the worker's receipt is "
                f"{'complete' if result.receipt.complete else 'incomplete'} but its export "
                f"at {export.url} is not"
            )
            return _replace(report, "PlatformLost", cause, ledger=export.ledger)
        return _replace(report, report.outcome, report.cause, ledger=export.ledger)
    where = f"{result.ledger_dir}, on the worker's disk"
    if require_export:
        cause = (
            f"export-missing: the worker on {task_queue} exported nothing, so the ledger "
            f"({where}) is not retained\n  next step: set the chart's ledgerExport.bucket (the "
            f"worker's SOCIETY_LEDGER_EXPORT) and run again"
        )
        return _replace(report, "PlatformLost", cause, ledger=None)
    progress.phase(f"the worker exported nothing: the ledger is at {where}")
    return report


def _no_result(run_id: str, outcome: Any, cause: str | None) -> RunReport:
    """A report for a run that returned no result; its ledger is on the worker's side."""
    return RunReport(
        outcome=outcome,
        exit="interrupted" if outcome == "Interrupted" else "failure",
        run_id=run_id,
        ledger_dir=None,
        receipt_complete=False,
        records=0,
        public_key=None,
        cause=cause,
    )


def _replace(
    report: RunReport, outcome: Any, cause: str | None, *, ledger: str | None, **changes: Any
) -> RunReport:
    from dataclasses import replace

    exit = report.exit if outcome == report.outcome else "failure"
    if "complete" in changes:
        changes["receipt_complete"] = changes.pop("complete")
    return replace(report, outcome=outcome, exit=exit, cause=cause, ledger_dir=ledger, **changes)
