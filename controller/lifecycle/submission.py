"""Binding a run's Temporal traffic to the ``society run`` process that submitted it.

The local dev server authenticates no client (``temporal server start-dev`` has no TLS or
authorizer options), so any local process that reaches it can start workflows, poll any task
queue and complete the tasks it takes. ``society run`` is its run's worker, so it holds a
per-run key, drawn from ``secrets`` and kept only in its memory (never in a payload, a file,
an argument or the environment):

- it MACs the ``RunRequest`` it submits. Its activities refuse, before anything else, a request
  without that MAC, one from a workflow execution other than the one this process started, a
  reservation for another run, and a second ``execute``;
- its ``execute`` MACs the ``RunResult``, and the CLI accepts a workflow result only with it.

A MAC is HMAC-SHA256 over a domain tag and the model's canonical JSON (sorted keys, no spaces),
as lowercase hex. It proves origin, not secrecy: payloads stay readable to whoever reaches the
server, which is why they carry no secrets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from controller.errors import LifecycleError
from controller.lifecycle.models import RunReservation
from controller.lifecycle.run_files import run_directory
from controller.run import RunRequest, RunResult

REQUEST_TAG = b"society-run-request/v1\n"
RESULT_TAG = b"society-run-result/v1\n"
START_WAIT_S = 60.0
"""How long an activity waits for this process to learn the workflow execution it started."""

REFUSED = "RunRequestRefused"
"""The ``ApplicationError`` type of every refusal; never retried."""


class ProvenRequest(RunRequest):
    """A ``RunRequest`` with its submitter's MAC; the workflow passes it through unread."""

    proof: str | None = None


class ProvenResult(RunResult):
    """A ``RunResult`` with the MAC of the worker that produced it."""

    proof: str | None = None


class ResultUnproven(LifecycleError):
    """A workflow result this process's worker did not produce; ``reason`` is machine-readable."""

    reason = "result-unproven"


@dataclass(eq=False)
class RunAuthority:
    """The submitting process's per-run key and what it submitted: one run, one execution."""

    request: RunRequest
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    _workflow_run_id: str | None = None
    _started: anyio.Event = field(default_factory=anyio.Event)
    _executed: bool = False

    def submission(self) -> dict[str, Any]:
        """The workflow input: the request and its MAC, as JSON."""
        proven = ProvenRequest(
            **self.request.model_dump(), proof=self._mac(REQUEST_TAG, self.request)
        )
        return proven.model_dump(mode="json")

    def started(self, workflow_run_id: str) -> None:
        """Record the workflow execution this process started; only its activities run."""
        self._workflow_run_id = workflow_run_id
        self._started.set()

    async def admit(self, request: RunRequest, *, execute: bool = False) -> None:
        """Refuse (``ApplicationError``, never retried) a request this process did not submit.

        Called first in every activity; nothing is imported, created or reaped before it.
        """
        proof = request.proof if isinstance(request, ProvenRequest) else None
        if proof is None or not hmac.compare_digest(proof, self._mac(REQUEST_TAG, request)):
            raise _refusal(
                "request-unproven",
                f"refused a request for run {request.run_id}: it does not carry the MAC of the "
                "`society run` that owns this task queue (another process submitted it)",
            )
        await self._admit_execution()
        if execute:
            if self._executed:
                raise _refusal(
                    "execute-replayed",
                    f"refused a second execute of run {self.request.run_id}: a program runs once",
                )
            self._executed = True

    async def admit_reservation(self, reservation: RunReservation) -> None:
        """Refuse a cleanup for anything but this run's own reservation."""
        expected = run_directory(self.request.artifact_root, self.request.run_id)
        if (reservation.run_id, reservation.namespace, reservation.artifact_dir) != (
            self.request.run_id,
            self.request.run_id,
            str(expected),
        ):
            raise _refusal(
                "reservation-foreign",
                f"refused a cleanup of {reservation.artifact_dir}: this worker cleans up only "
                f"run {self.request.run_id}",
            )
        await self._admit_execution()

    def prove(self, result: RunResult) -> ProvenResult:
        """``result`` with this run's MAC: what ``execute`` returns through Temporal."""
        return ProvenResult(**dict(result), proof=self._mac(RESULT_TAG, result))

    def accept(self, document: object) -> RunResult:
        """The workflow's result if this process's ``execute`` proved it; else refused."""
        try:
            result = ProvenResult.model_validate(document)
        except ValidationError as error:
            raise ResultUnproven(
                f"the run's result is malformed: {error}", reason="result-malformed"
            ) from None
        if result.proof is None or not hmac.compare_digest(
            result.proof, self._mac(RESULT_TAG, result)
        ):
            raise ResultUnproven(
                f"refused the result of run {self.request.run_id}: it does not carry the MAC of "
                "this process's worker (another worker answered on the run's task queue)",
                reason="result-unproven",
            )
        if result.run_id != self.request.run_id:
            raise ResultUnproven(f"the result names run {result.run_id}", reason="result-unproven")
        return RunResult(**{name: value for name, value in result if name != "proof"})

    async def _admit_execution(self) -> None:
        info = activity.info()
        with anyio.move_on_after(START_WAIT_S):
            await self._started.wait()
        if (info.workflow_id, info.workflow_run_id) != (
            self.request.run_id,
            self._workflow_run_id,
        ):
            raise _refusal(
                "execution-foreign",
                f"refused an activity of workflow {info.workflow_id} ({info.workflow_run_id}): "
                f"this worker serves only the run {self.request.run_id} it started",
            )

    def _mac(self, tag: bytes, model: BaseModel) -> str:
        document = model.model_dump(mode="json", exclude={"proof"})
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hmac.new(self._key, tag + canonical.encode(), hashlib.sha256).hexdigest()


def _refusal(reason: str, message: str) -> ApplicationError:
    return ApplicationError(message, reason, type=REFUSED, non_retryable=True)
