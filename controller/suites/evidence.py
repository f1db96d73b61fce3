"""One run's evidence as the suite reports it: verified ledger, outcome, grader output, usage.

Everything here is recomputed from the run's ledger and the grader alone, never from what the
run's own result line claimed, so ``society suite verify`` can redo it byte for byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from controller.errors import SocietyError
from controller.events import core_events
from controller.events.run import (
    PlatformFailed,
    ProgramFailed,
    ProgramInterrupted,
    ReadinessGateFailed,
    RosterRefused,
    RunStarted,
)
from controller.modelgateway.events import (
    AgentModelCallFailed,
    AgentModelUsage,
    model_gateway_catalog,
)
from controller.modelgateway.usage import UsageTally, summarize
from controller.run.runid import RUN_ID_PATTERN
from controller.suites.definition import TIE, Slot, Suite, SuiteError
from ledger import EventCatalog, LedgerError
from ledger.grading import grade_ledger
from ledger.verification import verify_ledger

Status = Literal["ranked", "failed", "unverified", "not-run"]
SUCCEEDED = frozenset({"society.program-succeeded/v2", "society.program-succeeded/v1"})


@dataclass(frozen=True, slots=True)
class RunEvidence:
    slot: Slot
    run_id: str | None
    status: Status
    reason: str | None = None
    detail: str | None = None
    receipt: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    value: Any = None
    """The result field: a score (single), the winner's competitor name, ``None`` for a tie
    (pairs, round-robin), or each seat's payoff (``ranking="score"``)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot.key,
            "competitors": list(self.slot.competitors),
            "seed": self.slot.seed,
            "runId": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "detail": self.detail,
            "ledgerDigest": None if self.receipt is None else self.receipt["headDigest"],
            "receipt": self.receipt,
            "result": self.result,
            "usage": self.usage,
        }


def assess(
    suite: Suite, grader: ModuleType, slot: Slot, run_id: str | None, ledger_dir: Path
) -> RunEvidence:
    """Verify, check that the ledger belongs to the slot, read the outcome, grade."""
    if run_id is None:
        return RunEvidence(slot, None, "not-run", "not-run", "the suite never started this run")
    if RUN_ID_PATTERN.match(run_id) is None:  # the journal is data: it names no path
        return RunEvidence(
            slot, run_id[:80], "unverified", "run-id-invalid",
            f"the journal names run id {run_id[:80]!r} for this slot, not sr-<32 hex>: a folder's "
            f"evidence lives in its own runs/<run id>/, never elsewhere",
        )  # fmt: skip
    reader = EventCatalog.merge(core_events, model_gateway_catalog)
    try:
        verified = verify_ledger(reader, ledger_dir, require_catalog=False)
    except LedgerError as exc:
        return RunEvidence(slot, run_id, "unverified", exc.reason, exc.detail)
    manifest, completion = verified.manifest, verified.completion
    assert completion is not None  # allow_incomplete=False
    receipt = {
        "records": completion.record_count,
        "headDigest": completion.head_digest,
        "publicKey": manifest.public_key,
        "signature": verified.signature,
        "complete": True,
    }
    events = [event for event in verified.events if event is not None]
    started = next((event for event in events if isinstance(event, RunStarted)), None)
    mismatch = _slot_mismatch(suite, slot, run_id, manifest.definition_id, started)
    if mismatch:
        return RunEvidence(slot, run_id, "unverified", "slot-mismatch", mismatch, receipt)
    usage = _usage(events)
    failure = _failure(events, [envelope.tag for envelope in verified.envelopes])
    if failure is not None:
        return RunEvidence(slot, run_id, "failed", *failure, receipt, usage=usage)
    try:
        result = grade_ledger(grader, ledger_dir, base_catalog=reader)
    except LedgerError as exc:
        return RunEvidence(
            slot, run_id, "failed", f"grader:{exc.reason}", exc.detail, receipt, usage=usage
        )
    value, problem = _result_value(suite, slot, result)
    if problem is not None:
        return RunEvidence(
            slot, run_id, "failed", "result-invalid", problem, receipt, result, usage
        )
    return RunEvidence(slot, run_id, "ranked", None, None, receipt, result, usage, value)


def _slot_mismatch(
    suite: Suite, slot: Slot, run_id: str, definition_id: str, started: RunStarted | None
) -> str | None:
    """Does the ledger hold this slot's run: its definition, seed and roster in order (the order
    is the seats: in a pair, who opens)?"""
    try:
        spec = suite.run_spec_for(slot.competitors)
    except SuiteError as exc:
        return str(exc)
    if definition_id != spec.id:
        return f"ledger of {run_id} holds definition {definition_id!r}, the slot builds {spec.id!r}"
    if started is None:
        return f"ledger of {run_id} records no run start"
    if started.seed != slot.seed:
        return f"ledger of {run_id} ran seed {started.seed}, the slot is seed {slot.seed}"
    if started.roster != list(spec.agents):
        return (
            f"ledger of {run_id} ran roster {started.roster}, the slot builds {list(spec.agents)}"
        )
    try:
        settings = suite.settings_for(slot.competitors)
    except SocietyError as exc:
        return str(exc)
    recorded = started.parameters or {}
    differing = sorted(key for key, value in settings.items() if recorded.get(key) != value)
    if differing:
        return (
            f"ledger of {run_id} ran parameters {recorded}, the slot sets "
            f"{ {key: settings[key] for key in differing} }"
        )
    return None


def _failure(events: list[Any], tags: list[str]) -> tuple[str, str] | None:
    for event in events:
        if isinstance(event, ProgramFailed):
            return f"program-failed:{event.reason}", event.detail
        if isinstance(event, ProgramInterrupted):
            return "program-interrupted", event.reason
        if isinstance(event, PlatformFailed):
            return f"platform-failed:{event.reason}", event.detail
        if isinstance(event, RosterRefused):
            return f"roster-refused:{event.reason}", event.detail
        if isinstance(event, ReadinessGateFailed):
            return (
                f"readiness-gate-failed:{event.reason}",
                f"not ready: {', '.join(event.failed)}; ready: {', '.join(event.ready) or 'none'}",
            )
    if not SUCCEEDED.intersection(tags):
        return "no-outcome", "the ledger is complete but records no program outcome"
    return None


def _usage(events: list[Any]) -> dict[str, Any] | None:
    tallies: dict[str, UsageTally] = {}
    for event in events:
        if isinstance(event, AgentModelUsage):
            tallies.setdefault(event.agent, UsageTally()).add_usage(event)
        elif isinstance(event, AgentModelCallFailed):
            tallies.setdefault(event.agent, UsageTally()).add_failure(event)
    if not tallies:
        return None
    return summarize(tallies).model_dump(mode="json", by_alias=True)


def _result_value(suite: Suite, slot: Slot, result: dict[str, Any]) -> tuple[Any, str | None]:
    if suite.matchups == "replicates":  # summarized field by field, never ranked
        return None, None
    if suite.result not in result:
        return None, f"the grader's result has no field {suite.result!r}"
    value = result[suite.result]
    if suite.matchups == "single":
        if not _finite(value):
            return None, f"{suite.result}={value!r} is not a finite number (a score)"
        return value, None
    if suite.ranking == "score":
        return _payoffs(suite, slot, value)
    if value is None or value == TIE:
        return None, None
    if value not in slot.seats:
        return None, (
            f"{suite.result}={value!r} names no competitor of this run "
            f"({', '.join(slot.seats)}) and is not {TIE!r} or null"
        )
    return slot.competitor_of(value), None


def _payoffs(suite: Suite, slot: Slot, value: Any) -> tuple[Any, str | None]:
    """A score suite's result: every seat of the run mapped to a finite payoff, nothing else."""
    if (
        not isinstance(value, dict)
        or set(value) != set(slot.seats)
        or not all(_finite(points) for points in value.values())
    ):
        return None, (
            f"{suite.result}={str(value)[:200]} does not map each seat of this run "
            f"({', '.join(slot.seats)}) to a finite number (its payoff)"
        )
    return {seat: float(value[seat]) for seat in slot.seats}, None


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
