"""The payloads the ``SocietyRun`` workflow itself reads: JSON-safe, frozen, free of secrets.

The run request and result are the kernel's ``RunRequest`` and ``RunResult``; the workflow
passes them through as plain JSON without importing the kernel.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Reservation(_Payload):
    """What ``prepare`` reserved: the run id, its namespace and its artifact directory."""

    run_id: str
    namespace: str
    artifact_dir: str


class ExecuteHeartbeat(_Payload):
    """The execute activity's heartbeat detail: the last phase, for ``society status``."""

    phase: str
