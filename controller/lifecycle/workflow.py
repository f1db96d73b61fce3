"""The ``SocietyRun`` workflow: prepare -> execute -> cleanup, for one run id.

Deterministic by construction: no clock, no randomness, no kernel imports. Activities are
called by name, so the sandbox never loads the controller.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from controller.lifecycle.models import RunReservation

PREPARE = "society.prepare"
EXECUTE = "society.execute"
CLEANUP = "society.cleanup"

EXECUTE_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
"""Generous because a busy controller may stall its loop; cancellation arrives sooner,
on the next heartbeat, which the worker sends at most a second apart."""

EXECUTE_TIMEOUT = timedelta(hours=24)
"""A ceiling, not a deadline: the program's own deadlines belong in ``execute(ctx)``."""


@workflow.defn(name="SocietyRun")
class SocietyRun:
    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` is the kernel's ``RunRequest`` and the result its ``RunResult``, as JSON."""
        reservation = await workflow.execute_activity(
            PREPARE,
            request,
            result_type=RunReservation,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=["RunIdTaken"]),
        )
        try:
            result: dict[str, Any] = await workflow.execute_activity(
                EXECUTE,
                request,
                result_type=dict[str, Any],
                start_to_close_timeout=EXECUTE_TIMEOUT,
                heartbeat_timeout=EXECUTE_HEARTBEAT_TIMEOUT,
                # The program runs at most once, and finalization ends before cleanup starts.
                retry_policy=RetryPolicy(maximum_attempts=1),
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except BaseException:
            await _shielded(_cleanup(reservation))
            raise
        exported = await _shielded(_cleanup(reservation))
        # Where cleanup exported the run (a worker with SOCIETY_LEDGER_EXPORT), for a submitter
        # that is not the worker and cannot read its disk.
        return result if exported is None else {**result, "export": exported}


def _cleanup(reservation: RunReservation) -> workflow.ActivityHandle[Any]:
    """Cleanup is retried, shielded from cancellation; its result says where it exported."""
    return workflow.start_activity(
        CLEANUP,
        reservation,
        # an attempt may run the export Job (up to 5.5 min) and delete the namespace (100 s)
        start_to_close_timeout=timedelta(minutes=10),
        schedule_to_close_timeout=timedelta(minutes=30),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
        ),
    )


async def _shielded(activity: workflow.ActivityHandle[Any]) -> Any:
    """``activity``'s result, waited for even if the workflow is cancelled meanwhile."""
    cancelled: asyncio.CancelledError | None = None
    while not activity.done():
        try:
            await workflow.wait([activity])  # unlike awaiting it, waiting never cancels it
        except asyncio.CancelledError as error:
            cancelled = error
    result = activity.result()
    if cancelled is not None:
        raise cancelled
    return result
