"""The payloads the ``SocietyRun`` workflow itself reads: JSON-safe, frozen, free of secrets.

The run request and result are the kernel's ``RunRequest`` and ``RunResult``; the workflow
passes them through as plain JSON without importing the kernel.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunReservation(_Payload):
    """What ``prepare`` reserved: the run id, its namespace and its artifact directory."""

    run_id: str
    namespace: str
    artifact_dir: str


class ExecuteHeartbeat(_Payload):
    """The execute activity's heartbeat detail: the last phase, for ``society status``."""

    phase: str


class LedgerExported(_Payload):
    """Where ``cleanup`` exported the run directory (``SOCIETY_LEDGER_EXPORT``): what the workflow
    adds to its result as ``export``, so a submitter that is not the worker learns the location."""

    url: str
    """The run directory's URL, ``gs://BUCKET/<run id>/``."""
    ledger: str | None
    """The ledger's URL inside it (``gs://BUCKET/<run id>/ledger/main``)."""
    complete: bool
    """False: the run left no completion; its signed prefix was exported, marked incomplete."""
    signed_records: int
    objects: int
    skipped: int
