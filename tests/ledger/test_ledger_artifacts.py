"""The offline view: typed, per-class, reusable and immutable; incomplete only when asked."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest
from ledger_testkit import (
    RUN_ID,
    Counted,
    Said,
    catalog,
    record_lines,
    sample_events,
    write_ledger,
    write_ledger_async,
    write_record_lines,
)

from ledger import (
    Event,
    LedgerCheckpoint,
    LedgerVerificationError,
    Record,
    SigningKey,
    open_ledger_artifacts,
)
from ledger.format import COMPLETION, RECORDS


def test_a_finished_ledger_opens_as_typed_records(tmp_path: Path) -> None:
    key = SigningKey.generate()
    ledger = open_ledger_artifacts(
        catalog,
        write_ledger(tmp_path / "l", 6, key=key),
        expected_definition_id="test.definition",
        trusted_key=key.public_key,
    )
    assert ledger.complete and ledger.stop is None
    assert ledger.run_id == RUN_ID and ledger.definition_id == "test.definition"
    assert ledger.signature == "pinned" and ledger.public_key == key.public_key
    assert len(ledger) == 7 and [r.sequence for r in ledger] == list(range(7))
    assert [r.event for r in ledger][:6] == sample_events(6)
    assert isinstance(ledger[-1].event, LedgerCheckpoint)
    assert ledger.last_checkpoint == 6
    assert ledger.metadata["purpose"] == "test"
    assert dict(ledger.tags()) == {
        "ledger.checkpoint/v1": 1,
        "test.counted/v1": 3,
        "test.said/v1": 3,
    }


def test_events_iterate_one_class_in_order_as_often_as_asked(tmp_path: Path) -> None:
    ledger = open_ledger_artifacts(catalog, write_ledger(tmp_path / "l", 9))
    said = [event.text for event in ledger.events(Said)]
    assert said == ["message 1", "message 3", "message 5", "message 7"]
    assert [event.text for event in ledger.events(Said)] == said  # reusable
    assert [event.n for event in ledger.events(Counted)] == [0, 2, 4, 6, 8]
    every = [record.sequence for record in ledger.records_of(Event)]
    assert every == list(range(10))  # a base class gathers every subclass, still in order


def test_the_view_is_immutable(tmp_path: Path) -> None:
    ledger = open_ledger_artifacts(catalog, write_ledger(tmp_path / "l", 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ledger.records = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ledger[0].event = Counted(n=5)
    with pytest.raises(TypeError):
        ledger.metadata["purpose"] = "changed"  # type: ignore[index]
    assert isinstance(ledger.records, tuple)


def test_a_crashed_ledger_opens_only_as_an_incomplete_view(tmp_path: Path) -> None:
    directory = write_ledger(tmp_path / "l", 5)
    (directory / COMPLETION).unlink()
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, directory)
    assert caught.value.reason == "incomplete"
    view = open_ledger_artifacts(catalog, directory, allow_incomplete=True)
    assert not view.complete and len(view) == 6
    assert view.stop is not None and view.stop.reason == "no-completion"
    assert view.stop.record_count == 6
    assert view.stop.byte_offset == (directory / RECORDS).stat().st_size
    assert view.last_checkpoint == 5


def test_a_torn_last_line_is_reported_never_accepted(tmp_path: Path) -> None:
    directory = write_ledger(tmp_path / "l", 5)
    (directory / COMPLETION).unlink()
    lines = record_lines(directory)
    kept = b"".join(lines[:4])
    (directory / RECORDS).write_bytes(kept + lines[4][:17])
    view = open_ledger_artifacts(catalog, directory, allow_incomplete=True)
    assert [record.sequence for record in view] == [0, 1, 2, 3]
    assert view.stop is not None and view.stop.reason == "torn-tail"
    assert view.stop.byte_offset == len(kept) and view.stop.record_count == 4
    assert "17 bytes" in view.stop.detail
    assert view.last_checkpoint is None  # no checkpoint before the tear: nothing is signed


def test_an_incomplete_view_still_refuses_damage_before_its_tail(tmp_path: Path) -> None:
    directory = write_ledger(tmp_path / "l", 5)
    (directory / COMPLETION).unlink()
    lines = record_lines(directory)
    del lines[1]
    write_record_lines(directory, lines)
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, directory, allow_incomplete=True)
    assert caught.value.reason == "sequence-gap"


def test_leaving_the_writer_without_completing_signs_the_tail(tmp_path: Path) -> None:
    directory = tmp_path / "l"
    anyio.run(lambda: write_ledger_async(directory, sample_events(4), complete=False))
    assert not (directory / COMPLETION).exists()
    view = open_ledger_artifacts(catalog, directory, allow_incomplete=True)
    assert len(view) == 5 and view.last_checkpoint == 4
    assert view.stop is not None and view.stop.reason == "no-completion"


def test_records_equal_when_their_envelope_and_event_do(tmp_path: Path) -> None:
    directory = write_ledger(tmp_path / "l", 3)
    first = open_ledger_artifacts(catalog, directory)
    second = open_ledger_artifacts(catalog, directory)
    assert list(first) == list(second)
    assert first[0] != first[1]
    record: Record = first[1]
    assert (record.producer, record.tag, record.event_id) == (
        "tester",
        "test.said/v1",
        f"{RUN_ID}:1",
    )
    assert "sequence=1" in repr(record)
