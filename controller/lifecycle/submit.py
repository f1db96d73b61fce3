"""Submitting one run and waiting for its report: ``submit(request, where=...) -> RunReport``.

``where`` says who runs it. Without a task queue this process is the run's worker: it joins the
artifact root's Temporal (``TEMPORAL_ADDRESS``, else the root's dev server), starts ``SocietyRun``
and serves it (``driver``). With one, a worker elsewhere polls that queue and this process only
submits and waits (``remote``). Either way every start first reaps what dead runs left
(``reap_stale``). The CLI builds the request, calls this, and prints the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from temporalio.client import Client

from controller.errors import SetupError
from controller.lifecycle import control, server
from controller.lifecycle.driver import Interrupts, RunDriver, RunReport
from controller.lifecycle.remote import SubmittedRun, check_authenticated
from controller.lifecycle.server import TemporalEndpoint
from controller.profiles import profile_named, reap_stale_here
from controller.run import Progress, RunRequest, RunSpec
from controller.run.artifact_root import check_private

Temporal = tuple[Client, TemporalEndpoint]


@dataclass(frozen=True, slots=True)
class Where:
    """Who runs a submitted run: this process (``task_queue`` ``None``) or the worker polling
    ``task_queue`` on the configured Temporal (``insecure_temporal``: trust one that authenticates
    no client)."""

    task_queue: str | None = None
    insecure_temporal: bool = False


async def submit(
    request: RunRequest,
    *,
    where: Where,
    spec: RunSpec,
    progress: Progress,
    interrupts: Interrupts,
) -> RunReport:
    """Run ``request`` where ``where`` says and wait for its report; raises a ``SocietyError``
    (nothing was started) when it cannot be submitted."""
    root = Path(request.artifact_root)
    check_private(root)  # before anything under it is read or written
    if where.task_queue is not None:
        return await _submit_to_queue(request, where, progress, interrupts)
    await reap_stale(root, await live_temporal(root))
    await profile_named(request.profile).check_reachable()
    if (root / request.run_id).exists():
        raise SetupError(
            f"{root / request.run_id} exists",
            reason="run-id-taken",
            next_step="omit --run-id for a fresh id",
        )
    dev_server: server.DevServer | None = None
    try:
        with interrupts.cancelling() as setup:
            endpoint = server.configured_endpoint()
            if endpoint is None:
                dev_server = server.DevServer(root)
                progress.phase("temporal: starting or joining the local dev server")
                endpoint = await dev_server.acquire(request.run_id)
            client = await server.connect(endpoint)
        if setup.cancelled_caught:
            return RunReport.from_artifacts(root, request.run_id, "Interrupted")
        _announce(progress, request.run_id, endpoint)
        driver = RunDriver(
            client, endpoint, request, spec=spec, progress=progress, interrupts=interrupts
        )
        return await driver.drive()
    finally:
        if dev_server is not None:
            await dev_server.release(request.run_id)


async def _submit_to_queue(
    request: RunRequest, where: Where, progress: Progress, interrupts: Interrupts
) -> RunReport:
    """Submit to the worker polling ``where.task_queue`` and wait for it; no worker runs here
    (``remote`` says why its result is trusted only from a Temporal that authenticates)."""
    queue = where.task_queue
    assert queue is not None
    endpoint = server.configured_endpoint()
    if endpoint is None:
        raise SetupError(
            f"task queue {queue} is polled by a run worker on your Temporal, and "
            f"{server.ADDRESS_ENV} is not set",
            reason="temporal-address-missing",
            next_step=f"set {server.ADDRESS_ENV} (host:port) and {server.NAMESPACE_ENV} of the "
            f"Temporal that worker polls, with {server.TLS_DIR_ENV} or {server.API_KEY_ENV} "
            "(GKE: what the chart's Temporal Secret holds)",
        )
    check_authenticated(endpoint, allow_unauthenticated=where.insecure_temporal)
    root = Path(request.artifact_root)
    await reap_stale(root, await live_temporal(root))
    with interrupts.cancelling() as setup:
        client = await server.connect(endpoint)
    if setup.cancelled_caught:
        return RunReport("Interrupted", "interrupted", request.run_id, None, False, 0, None)
    _announce(progress, request.run_id, endpoint)
    submitted = SubmittedRun(
        client,
        endpoint,
        request,
        task_queue=queue,
        progress=progress,
        interrupts=interrupts,
        require_export=profile_named(request.profile).exports,
    )
    return await submitted.drive()


def _announce(progress: Progress, run_id: str, endpoint: TemporalEndpoint) -> None:
    ui = server.workflow_url(endpoint, run_id)
    progress.phase(f"run {run_id}: Temporal at {endpoint.address}, namespace {endpoint.namespace}")
    progress.phase(f"temporal ui: {ui or f'not known (set {server.UI_ENV})'}")


async def live_temporal(root: Path) -> Temporal | None:
    """A client for the Temporal this root's runs use, if one answers."""
    endpoint = server.configured_endpoint() or server.DevServer(root).live_endpoint()
    if endpoint is None:
        return None
    try:
        return await server.connect(endpoint), endpoint
    except server.TemporalUnavailable:
        return None


async def reap_stale(root: Path, temporal: Temporal | None) -> None:
    """What every ``society`` start does: reap what dead runs left, end their workflows, and
    stop a dev server no live run holds."""
    await reap_orphans(root, temporal)
    await server.DevServer(root).reap()


async def reap_orphans(root: Path, temporal: Temporal | None) -> None:
    """Reap the runs under ``root`` whose controller died, and end their workflows."""
    reports: list[Any] = await anyio.to_thread.run_sync(reap_stale_here, root)
    orphans = [report.run_id for report in reports if report.skipped is None]
    if orphans and temporal is not None:
        await control.terminate_orphans(temporal[0], orphans)
