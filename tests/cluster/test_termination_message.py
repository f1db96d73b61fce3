"""The controller Job reports its result in a termination message of at most 4,096 bytes: what
does not fit gives way in a stated order, and what is left still parses as the run's result."""

from __future__ import annotations

from controller.incluster.main import MESSAGE_LIMIT, termination_message
from controller.run.request import RunResult
from ledger.records import LedgerReceipt


def _result(**changes: object) -> RunResult:
    receipt = LedgerReceipt(
        ledger_dir="/artifacts/sr-" + "a" * 32,
        run_id="sr-" + "a" * 32,
        record_count=12,
        head_digest="b" * 64,
        public_key="ed25519:AA",
        complete=True,
    )
    fields: dict[str, object] = {
        "outcome": "ProgramFinished",
        "exit": "success",
        "run_id": receipt.run_id,
        "ledger_dir": receipt.ledger_dir,
        "receipt": receipt,
        "records": 12,
        "public_key": "ed25519:AA",
    }
    return RunResult.model_validate({**fields, **changes})


def test_a_small_value_is_reported_as_it_is() -> None:
    result = _result(value={"deals": 3})
    assert RunResult.model_validate_json(termination_message(result)) == result


def test_a_value_too_large_for_the_message_gives_way_first_with_a_note() -> None:
    usage = {"total": {"calls": 4, "costUsd": None}}
    result = _result(value={"transcript": "x" * 10_000}, usage=usage)
    message = termination_message(result)
    assert len(message.encode()) <= MESSAGE_LIMIT
    reported = RunResult.model_validate_json(message)
    assert reported.value is None and reported.usage == usage
    assert reported.value_note is not None and reported.value_note.startswith("value-too-large")
    assert "program-succeeded/v2 record holds the value" in reported.value_note
