"""A run's state and its cancellation, by run id under an artifact root: ``society status`` and
``society cancel`` as library functions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import SocietyError

if TYPE_CHECKING:
    from temporalio.client import Client

    from controller.lifecycle.server import TemporalEndpoint


async def reap_stale_asking(
    root: Path, run_id: str
) -> tuple[tuple[Client, TemporalEndpoint] | None, dict[str, Any] | None]:
    """``reap_stale``, asking for ``run_id``'s workflow between ending orphaned workflows and
    stopping a dev server no live run holds: a killed controller's run was often that server's
    last holder, and its answer (``terminated``) would go with it. A Temporal that stops
    answering gives ``(None, None)``, as one that never answered does."""
    from controller.lifecycle import control, server
    from controller.lifecycle.submit import live_temporal, reap_orphans

    temporal = await live_temporal(root)
    await reap_orphans(root, temporal)
    live = None
    if temporal is not None:
        try:
            live = await control.live_status(*temporal, run_id)
        except server.TemporalUnavailable:
            temporal = None
    await server.DevServer(root).reap()
    return temporal, live


async def status(root: Path, run_id: str) -> dict[str, Any]:
    """A run's state under the artifact root ``root``, as ``society status`` prints it:
    ``running`` (with its phase from Temporal), ``finalizing`` (a cancel was asked or its
    workflow closed; its controller is finishing), ``finished`` (with its result) or
    ``abandoned`` (its controller died before reporting)."""
    from controller.lifecycle import run_files, server

    _, live = await reap_stale_asking(root, run_id)
    record = run_files.run_record(root, run_id)
    result = run_files.finished_result(root, run_id)
    ledger = run_files.read_ledger_state(root / run_id)
    controller_alive = server.pid_alive(int(record.get("controllerPid") or 0))
    if result:
        return {"state": "finished", **result}
    if not (root / run_id).is_dir():
        raise SocietyError(
            f"no run {run_id} under {root}",
            reason="run-unknown",
            next_step="pass the --artifacts DIR it ran under",
        )
    on_disk = {
        "module": record.get("module"),
        "ledger": ledger.directory,
        "receipt": "complete" if ledger.complete else "incomplete",
        "records": ledger.records,
        "publicKey": ledger.public_key,
    }
    if controller_alive:
        if live is None:  # its controller lives, but this Temporal does not know the workflow
            return {"state": "running", "runId": run_id, "workflow": None, **on_disk}
        if live["workflow"] == "running" and not live["cancelRequested"]:
            return {"state": "running", **live, **on_disk}
        # cancelled (or its workflow closed) and its controller still finalizing and cleaning up
        return {"state": "finalizing", **live, **on_disk}
    # No result and no live controller: it died before reporting.
    workflow = None if live is None else live["workflow"]
    return {"state": "abandoned", "runId": run_id, "workflow": workflow, **on_disk}


async def cancel(root: Path, run_id: str, *, wait: bool) -> dict[str, Any]:
    """Cancel the live run ``run_id`` (its own controller finalizes the ledger, cleans up and
    reports ``Interrupted``); with ``wait``, return once its workflow has ended."""
    from controller.lifecycle import control

    temporal, live = await reap_stale_asking(root, run_id)
    if temporal is None or live is None or live["workflow"] != "running":
        raise SocietyError(
            f"run {run_id} is not live under {root}",
            reason="run-not-live",
            next_step=f"`society status {run_id}` shows how it ended",
        )
    workflow = await control.cancel(temporal[0], run_id, wait=wait)
    return {
        "runId": run_id,
        "cancel": "done" if wait else "requested",
        "workflow": workflow,
    }
