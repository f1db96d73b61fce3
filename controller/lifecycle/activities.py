"""The activities of ``SocietyRun``: prepare, execute (the controller), cleanup.

They run in the worker's process; on the local profile that is the ``society run`` process, so
``execute`` reports progress straight to the terminal and cancelling it reaches the kernel.
With a ``RunAuthority`` (``society run`` passes its own) each activity first refuses whatever
that process did not submit (``submission``), and ``execute`` runs the ``run_spec`` the CLI
loaded (in the module's own process) before anything started. What each step
means for the request's profile (a namespace to prepare, a controller Job to run in-cluster, an
export) the ``Profile`` says (``controller.profiles``); nothing here compares a profile's name.

A worker that serves other processes' submissions (``worker``) places every run under its own
artifact root, whatever root the request names (that is the submitter's machine), and runs the
module's content the request carries (``module_source``) rather than reading ``module_path``,
in the module's own sandboxed process (``controller.program``): the worker never imports it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from controller.lifecycle.models import ExecuteHeartbeat, LedgerExported, RunReservation
from controller.lifecycle.run_files import (
    run_directory,
    run_record,
    write_run_record,
)
from controller.lifecycle.submission import ProvenRequest, RunAuthority
from controller.lifecycle.workflow import CLEANUP, EXECUTE, PREPARE
from controller.profiles import (
    DEFAULT,
    Profile,
    UnknownProfile,
    check_worker_request,
    profile_named,
    reap_here,
)
from controller.run import (
    NO_PROGRESS,
    Counter,
    Progress,
    RunRequest,
    RunResult,
    RunSpec,
)
from controller.run.platform import PlatformError

HEARTBEAT_EVERY_S = 1.0
SDK_CANCEL_WAIT_S = 5.0
"""How long ``LifecycleActivities.stop`` waits for the SDK's own cancel of ``execute``."""
MODULE_DIRECTORY = "module"
"""Where, in the run directory, a worker writes the module content it was sent, and runs it."""


class LifecycleActivities:
    """One worker's activities; ``progress`` is where ``execute`` reports, if anywhere.

    ``authority`` (with the ``spec`` loaded from its request's module) makes them serve that one
    run only; without it they serve any request on the queue, as the cluster's run worker does.
    ``artifact_root`` (a worker's own) replaces the root every request names.
    """

    def __init__(
        self,
        progress: Progress | None = None,
        *,
        authority: RunAuthority | None = None,
        spec: RunSpec | None = None,
        artifact_root: Path | None = None,
    ) -> None:
        self._progress = progress
        self._authority = authority
        self._spec = spec
        self._artifact_root = artifact_root
        self._running: asyncio.Task[Any] | None = None
        self._settled: anyio.Event | None = None  # set: the SDK cancelled execute, or it ended

    def _placed(self, request: ProvenRequest) -> ProvenRequest:
        """``request`` under this worker's artifact root, if it has one."""
        if self._artifact_root is None:
            return request
        return request.model_copy(update={"artifact_root": str(self._artifact_root)})

    def abort(self) -> None:
        """Cancel a running ``execute`` from this process, as Temporal's cancel would.

        The host task is cancelled (edge-triggered), never an enclosing scope: the kernel
        finalizes the ledger on the way out and needs its own tasks alive to do so.
        """
        if self._running is not None:
            self._running.cancel()

    async def stop(self, *, grace_s: float = SDK_CANCEL_WAIT_S) -> None:
        """Cancel a running ``execute`` once, gracefully: the kernel's wind-down and the ledger's
        finalization then run to their end.

        A workflow that closed under the activity (another worker completed it) or a server that
        went away makes the SDK cancel ``execute`` itself, at about the moment its driver learns
        of it; a second cancel from here would land in the wind-down (asyncio delivers each
        cancel once, wherever the task is) and cut the agents' harvest short. So this waits up to
        ``grace_s`` for that cancel, and cancels only if none came.
        """
        task, settled = self._running, self._settled
        if task is None or settled is None:
            return
        with anyio.move_on_after(grace_s):
            await settled.wait()
        if not settled.is_set():
            task.cancel()

    @activity.defn(name=PREPARE)
    async def prepare(self, request: ProvenRequest) -> RunReservation:
        """Reserve the run id, namespace and artifact directory; nothing else, no secrets."""
        _check_in_cluster(request)
        if self._authority is not None:
            await self._authority.admit(request)
        request = self._placed(request)
        directory = run_directory(request.artifact_root, request.run_id)
        workflow_run_id = activity.info().workflow_run_id
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new root: ours only
        try:
            directory.mkdir(mode=0o700)  # its ledger and artifacts: the submitter's only
        except FileExistsError:
            # a retry of this very prepare finds its own directory; anything else is a clash
            if run_record(directory.parent, request.run_id).get("workflowRunId") != workflow_run_id:
                raise ApplicationError(
                    f"run id {request.run_id} is taken: {directory} exists "
                    "(omit --run-id to get a fresh one)",
                    type="RunIdTaken",
                    non_retryable=True,
                ) from None
        record = {
            "runId": request.run_id,
            "workflowRunId": workflow_run_id,
            "module": request.module_path,
            "profile": request.profile,
            "seed": request.seed,
            "controllerPid": os.getpid(),
        }
        write_run_record(directory, record)
        profile = _profile(request.profile)
        if profile.cluster:
            self._phase(f"preparing namespace {request.run_id}")
        await profile.prepare(request.run_id)
        self._phase(f"prepared {directory}")
        return RunReservation(
            run_id=request.run_id, namespace=request.run_id, artifact_dir=str(directory)
        )

    @activity.defn(name=EXECUTE)
    async def execute(self, request: ProvenRequest) -> RunResult:
        """Run the controller once, heartbeating; a cancel finalizes the ledger, then re-raises."""
        if self._authority is not None:
            await self._authority.admit(request, execute=True)
        request = self._placed(request)
        progress = _ReportingProgress(self._progress)
        failure: Exception | None = None
        self._running = asyncio.current_task()
        self._settled = settled = anyio.Event()
        try:
            async with anyio.create_task_group() as heartbeats:
                heartbeats.start_soon(_heartbeat, progress)
                heartbeats.start_soon(_set_when_cancelled, settled)
                try:
                    result = await _execute(request, progress, self._spec)
                except Exception as error:  # raised below, not wrapped in an exception group
                    failure = error
                heartbeats.cancel_scope.cancel()
        finally:
            self._running = None
            settled.set()
        if failure is not None:
            raise failure
        return result if self._authority is None else self._authority.prove(result)

    @activity.defn(name=CLEANUP)
    async def cleanup(self, reservation: RunReservation) -> LedgerExported | None:
        """Reap everything the run left, export it where configured; safe to retry and to run
        after any ending. Returns where it exported, if it did."""
        if self._authority is not None:
            await self._authority.admit_reservation(reservation)
        self._phase("cleanup: reaping the run's processes")
        root = Path(reservation.artifact_dir).parent
        await reap_here(reservation.run_id, root)
        profile = _profile(run_record(root, reservation.run_id).get("profile", DEFAULT))
        exported = await self._export(reservation, profile)
        if profile.cluster:
            self._phase(f"cleanup: deleting namespace {reservation.namespace}")
        await profile.reap(reservation.run_id, root)
        self._phase("cleanup: done")
        return exported

    async def _export(self, reservation: RunReservation, profile: Profile) -> LedgerExported | None:
        """The run to the ledger bucket where configured (``SOCIETY_LEDGER_EXPORT``), before the
        namespace goes. A failure fails cleanup, which Temporal retries; the export resumes."""
        from controller.stores.gcs import LedgerExportError
        from ledger import LedgerError

        try:
            receipt = await profile.export(
                Path(reservation.artifact_dir), reservation.run_id, self._phase
            )
        except (LedgerExportError, LedgerError) as error:
            retry = error.reason == "export-failed"
            raise ApplicationError(str(error), type=error.reason, non_retryable=not retry) from None
        if receipt is None:
            return None
        state = "complete" if receipt.complete else "incomplete (signed prefix)"
        self._phase(f"cleanup: exported the run to {receipt.url}: {state}")
        return LedgerExported(
            url=receipt.url,
            ledger=receipt.ledger_url(),
            complete=receipt.complete,
            signed_records=receipt.signed_records,
            objects=receipt.objects,
            skipped=receipt.skipped,
        )

    def _phase(self, text: str) -> None:
        if self._progress is not None:
            self._progress.phase(text)


async def _execute(request: RunRequest, progress: Progress, spec: RunSpec | None) -> RunResult:
    """The controller, where the request's profile runs it."""
    _check_in_cluster(request)
    profile = _profile(request.profile)
    if spec is None and request.module_source is not None and profile.runs_controller_here():
        from controller.program.process import isolated_module

        module = await anyio.to_thread.run_sync(_sent_module, request)
        # the module's own sandboxed process defines its run_spec and runs its program
        async with isolated_module(module) as sent:
            return await profile.execute(RunRequest(**_fields(request)), progress, sent)
    return await profile.execute(RunRequest(**_fields(request)), progress, spec)


def _profile(name: str) -> Profile:
    """The request's profile; an unknown one fails the activity for good."""
    try:
        return profile_named(name)
    except UnknownProfile as error:
        raise ApplicationError(str(error), type=error.reason, non_retryable=True) from None


def _sent_module(request: RunRequest) -> Path:
    """The module content the submitter sent, written into the run directory (so it stays with
    the run's evidence) once it matches its digest; ``module_path`` names a file on the
    submitter's machine and is never read here."""
    assert request.module_source is not None
    content = request.module_source.verified()
    directory = run_directory(request.artifact_root, request.run_id) / MODULE_DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    module = directory / request.module_source.name
    module.write_text(content, encoding="utf-8")
    return module


def _fields(request: RunRequest) -> dict[str, Any]:
    """The kernel's request, without the submitter's proof."""
    return {name: value for name, value in request if name in RunRequest.model_fields}


def _check_in_cluster(request: RunRequest) -> None:
    """A run worker in a cluster refuses what it must not run, typed and final, before it
    creates or imports anything."""
    try:
        check_worker_request(request)
    except PlatformError as error:
        raise ApplicationError(str(error), type=error.reason, non_retryable=True) from None


async def _set_when_cancelled(settled: anyio.Event) -> None:
    """In ``execute``'s activity context: set ``settled`` when the SDK cancels it."""
    await activity.wait_for_cancelled()
    settled.set()


async def _heartbeat(progress: _ReportingProgress) -> None:
    while True:
        activity.heartbeat(ExecuteHeartbeat(phase=progress.last_phase))
        await anyio.sleep(HEARTBEAT_EVERY_S)


class _ReportingProgress:
    """Passes progress on, and remembers the last phase for the heartbeat."""

    def __init__(self, inner: Progress | None) -> None:
        self._inner = inner or NO_PROGRESS
        self.last_phase = "starting the controller"

    def phase(self, text: str) -> None:
        self.last_phase = text
        self._inner.phase(text)

    def counter(self, label: str, total: int) -> Counter:
        self.last_phase = label
        return self._inner.counter(label, total)

    def program_started(self, ledger_dir: Path) -> None:
        self.last_phase = "running program"
        self._inner.program_started(ledger_dir)
