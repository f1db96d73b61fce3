"""``execute_run``: the controller entry point the lifecycle calls with a JSON-safe request."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError, field_validator

import controller.settings as settings
from controller.errors import SetupError
from controller.run.fork import ForkRequest
from controller.run.kernel import DEFAULT_LEDGER_REF, Run
from controller.run.module_source import ModuleSource
from controller.run.outcomes import Outcome, PlatformLost, Success
from controller.run.platform import Platform
from controller.run.progress import Progress
from controller.run.runid import check_run_id
from controller.run.spec import RunSpec, load_run_spec
from ledger.records import LedgerReceipt

SIGNING_KEY_VARIABLE = settings.SIGNING_KEY.name
"""Names the operator's key file (PEM); only the ledger's signer process reads the file."""
SIGNER_SOCKET_VARIABLE = settings.SIGNER_SOCKET.name
"""Where a signer listens that holds the run's key (the controller Job's signer container)."""

LEDGER_REF_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class RunRequestError(SetupError, ValueError):
    """A request field is not a path or name the controller will use; ``reason`` says which."""

    reason = "run-request-invalid"


class RunRequest(BaseModel):
    """What to run, where, and as which run id; carries no secrets.

    Paths are absolute and normalised (no ``..``, no doubled or trailing ``/``, no control
    characters), the module is a ``.py`` file and ``ledger_ref`` is one plain directory name, so
    a request can name nothing outside the places it states. ``build`` raises the typed
    ``RunRequestError``; constructing the model directly raises pydantic's ``ValidationError``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    module_path: str
    run_id: str
    profile: str = "local"
    artifact_root: str
    seed: int | None = None
    ledger_ref: str = DEFAULT_LEDGER_REF
    module_source: ModuleSource | None = None
    """The module as content, for a worker that is not on the submitter's machine (a cluster's
    run worker uses only this, never ``module_path``)."""
    parameters: dict[str, Any] | None = None
    """Values for the RunSpec's declared parameters (``society run --set KEY=VALUE``)."""
    fork: ForkRequest | None = None
    """The parent this run forks, and the fork point (``society run --fork DIR --at N``)."""

    @classmethod
    def build(cls, **fields: Any) -> RunRequest:
        """The request, or the first field's ``RunRequestError`` (``RunIdError`` for the id)."""
        try:
            return cls(**fields)
        except ValidationError as invalid:
            for error in invalid.errors():
                cause = (error.get("ctx") or {}).get("error")
                if isinstance(cause, SetupError):
                    raise cause from None
            raise RunRequestError(str(invalid), reason="run-request-invalid") from None

    @field_validator("run_id")
    @classmethod
    def _one_format(cls, value: str) -> str:
        return check_run_id(value)

    @field_validator("module_path")
    @classmethod
    def _a_module_file(cls, value: str) -> str:
        checked = _absolute_path(value, "module-path-invalid", "module_path")
        if not checked.endswith(".py"):
            raise RunRequestError(
                f"module_path {value!r} is not a .py file (pass MODULE.py)",
                reason="module-path-invalid",
            )
        return checked

    @field_validator("artifact_root")
    @classmethod
    def _a_root(cls, value: str) -> str:
        return _absolute_path(value, "artifact-root-invalid", "artifact_root")

    @field_validator("ledger_ref")
    @classmethod
    def _a_plain_name(cls, value: str) -> str:
        if LEDGER_REF_PATTERN.match(value) is None or value.strip(".") == "":
            raise RunRequestError(
                f"ledger_ref {value!r} is not one plain name (lowercase letters, digits, '.', "
                "'_', '-'; at most 63; not '.' or '..'); omit it for the default "
                f"{DEFAULT_LEDGER_REF!r}",
                reason="ledger-ref-invalid",
            )
        return value


def _absolute_path(value: str, reason: str, field: str) -> str:
    """``value`` if it is an absolute, normalised path without control characters."""
    if (
        not value.startswith("/")
        or any(ord(character) < 0x20 or ord(character) == 0x7F for character in value)
        or posixpath.normpath(value) != value
        or value.startswith("//")
        or ".." in value.split("/")
    ):
        raise RunRequestError(
            f"{field} {value!r} is not an absolute, normalised path (no '..', no doubled or "
            "trailing '/', no control characters); pass the resolved path",
            reason=reason,
        )
    return value


class RunResult(BaseModel):
    """A run's outcome as data: safe to print as JSON and to return from an activity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: Literal["ProgramFinished", "PlatformLost"]
    exit: Literal["success", "failure"]
    cause: str | None = None
    """Why it failed: the program's error, or the platform's cause (``reason: detail``)."""
    reason: str | None = None
    run_id: str
    ledger_dir: str
    receipt: LedgerReceipt
    records: int
    public_key: str
    usage: dict[str, Any] | None = None
    """Model use per agent and in total, as the run's model gateway measured it; ``None`` when
    the roster has no model-using agent. An unknown cost stays ``None``."""
    value: JsonValue = None
    """What ``execute`` returned, as JSON (``Success.kept``); ``None`` on failure."""
    value_note: str | None = None
    """Why a returned value was not kept (not JSON data, or over the size cap)."""

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> RunResult:
        receipt = outcome.receipt
        common = {
            "run_id": receipt.run_id,
            "ledger_dir": receipt.ledger_dir,
            "receipt": receipt,
            "records": receipt.record_count,
            "public_key": receipt.public_key,
            "usage": outcome.reports.get("usage"),
        }
        if isinstance(outcome, PlatformLost):
            return cls(
                outcome="PlatformLost",
                exit="failure",
                cause=str(outcome.cause),
                reason=outcome.cause.reason,
                **common,
            )
        if isinstance(outcome.exit, Success):
            return cls(
                outcome="ProgramFinished",
                exit="success",
                value=outcome.exit.kept,
                value_note=outcome.exit.note,
                **common,
            )
        failure = outcome.exit
        return cls(
            outcome="ProgramFinished",
            exit="failure",
            cause=getattr(failure, "detail", None),
            reason=getattr(failure, "reason", None),
            **common,
        )


async def execute_run(
    request: RunRequest,
    platform: Platform,
    *,
    progress: Progress | None = None,
    spec: RunSpec | None = None,
) -> RunResult:
    """Run the module's ``run_spec`` once on ``platform``, finalize.

    The entry point that runs the request (the Temporal activity, the in-cluster controller)
    resolves ``request.profile`` to ``platform``: the kernel never picks a platform by name.

    ``spec`` is that ``run_spec`` when the caller already loaded it from ``request.module_path``
    (``society run`` does, before anything starts); otherwise the module is loaded here, late.
    Raises ``RunSpecError`` for a bad module (before anything starts), and whatever stops the
    ledger from being created. Cancellation propagates after the run was finalized.
    """
    if spec is None:
        spec = load_run_spec(request.module_path)
    outcome = await Run.execute(
        spec,
        platform=platform,
        run_id=request.run_id,
        artifact_root=Path(request.artifact_root),
        seed=request.seed,
        ledger_ref=request.ledger_ref,
        progress=progress,
        signing_key_file=settings.current().get(settings.SIGNING_KEY),
        signer_socket=settings.current().get(settings.SIGNER_SOCKET),
        parameters=request.parameters,
        fork=request.fork,
    )
    return RunResult.from_outcome(outcome)
