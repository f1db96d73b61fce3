"""Acting on a run by its id from any process: its live state, cancelling it, and ending the
workflows of runs whose controller died. A server that stops answering (a dev server stopped by
the reaping of its last run, or killed) raises ``TemporalUnavailable``, never a bare RPC error."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import is_cancelled_exception
from temporalio.service import RPCError, RPCStatusCode

from controller.lifecycle.models import ExecuteHeartbeat
from controller.lifecycle.server import TemporalEndpoint, TemporalUnavailable, workflow_url
from controller.lifecycle.workflow import EXECUTE


async def live_status(
    client: Client, endpoint: TemporalEndpoint, run_id: str
) -> dict[str, Any] | None:
    """The live run's workflow state, or None when Temporal does not know ``run_id``."""
    handle = client.get_workflow_handle(run_id)
    with _answered(client):
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
    status = description.status or WorkflowExecutionStatus.RUNNING
    document: dict[str, Any] = {
        "runId": run_id,
        "workflow": status.name.lower(),
        "temporal": endpoint.address,
        "ui": workflow_url(endpoint, run_id),
        "cancelRequested": description.raw_description.workflow_extended_info.cancel_requested,
    }
    for pending in description.raw_description.pending_activities:
        document["step"] = pending.activity_type.name.removeprefix("society.")
        if pending.activity_type.name == EXECUTE and pending.heartbeat_details.payloads:
            [beat] = await client.data_converter.decode(
                pending.heartbeat_details.payloads, [ExecuteHeartbeat]
            )
            document["phase"] = beat.phase
    return document


async def cancel(client: Client, run_id: str, *, wait: bool) -> str:
    """Cancel the live run ``run_id``; with ``wait``, return once its workflow has closed."""
    handle = client.get_workflow_handle(run_id)
    with _answered(client):
        await handle.cancel()
        if not wait:
            return "cancel-requested"
        try:
            await handle.result()
        except WorkflowFailureError as error:
            return "cancelled" if is_cancelled_exception(error.cause) else "failed"
    return "completed"


_GONE = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)


@contextlib.contextmanager
def _answered(client: Client) -> Iterator[None]:
    """An RPC failure of ``client``'s calls as ``TemporalUnavailable`` (its cause kept)."""
    try:
        yield
    except RPCError as error:
        address = client.service_client.config.target_host
        if error.status in _GONE:
            raise TemporalUnavailable(
                f"the Temporal server at {address} stopped answering: {error.message}",
                reason="temporal-unreachable",
                next_step="run the command again: a local dev server that no live run holds is "
                "stopped, and `society status RUN_ID` then reads the run from its directory",
            ) from error
        raise TemporalUnavailable(
            f"the Temporal server at {address} refused the request ({error.status.name}): "
            f"{error.message}",
            reason="temporal-request-failed",
            next_step=f"check that {address} is the Temporal this artifact root's runs use, with "
            "their namespace",
        ) from error


async def terminate_orphans(client: Client, run_ids: Iterable[str]) -> list[str]:
    """Terminate the still-open workflows of runs whose controller died; returns their ids."""
    terminated = []
    for run_id in run_ids:
        handle = client.get_workflow_handle(run_id)
        with contextlib.suppress(RPCError):
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("its controller died; reaped by a later `society` start")
                terminated.append(run_id)
    return terminated
