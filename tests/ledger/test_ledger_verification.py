"""Every verification reason, produced by the tampering (or forging) that should produce it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ledger_testkit import (
    RUN_ID,
    Counted,
    Said,
    Unused,
    catalog,
    forge,
    record_lines,
    write_ledger,
    write_record_lines,
)

from ledger import (
    VERIFICATION_REASONS,
    EventCatalog,
    LedgerCheckpoint,
    LedgerVerificationError,
    SigningKey,
    open_ledger_artifacts,
)
from ledger.canonical import canonical_json
from ledger.format import COMPLETION, MANIFEST, RECORDS


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def ledger_dir(tmp_path: Path, key: SigningKey) -> Path:
    return write_ledger(tmp_path / "ledger", 6, key=key)


def _edit_line(directory: Path, index: int, edit: Callable[[dict[str, Any]], None]) -> None:
    lines = record_lines(directory)
    row = json.loads(lines[index])
    edit(row)
    lines[index] = canonical_json(row) + b"\n"
    write_record_lines(directory, lines)


def _set_event(field: str, value: Any, index: int) -> Callable[[list[dict[str, Any]]], Any]:
    def edit(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[index]["event"][field] = value
        return rows

    return edit


# Each scenario damages a fresh, valid 7-record ledger (records 0-5 and a final checkpoint, 6)
# and returns keyword arguments for open_ledger_artifacts (catalog included).
Scenario = Callable[[Path, SigningKey], dict[str, Any]]


def manifest_missing(d: Path, key: SigningKey) -> dict[str, Any]:
    (d / MANIFEST).unlink()
    return {}


def manifest_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    forge(d, key, manifest=lambda m: m.update(unexpected="field"))
    return {}


def format_unsupported(d: Path, key: SigningKey) -> dict[str, Any]:
    forge(d, key, manifest=lambda m: m.update(ledgerFormatVersion=2))
    return {}


def definition_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    return {"expected_definition_id": "another.definition"}


def catalog_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    return {"catalog": EventCatalog.make(Said)}  # the reader lost Counted


def key_not_trusted(d: Path, key: SigningKey) -> dict[str, Any]:
    # Edit a record, recompute every digest and the chain, sign with a key of one's own: the
    # self-signature now verifies; only the pinned key catches it.
    forge(d, SigningKey.generate(), records=_set_event("text", "forged", 1), set_public_key=True)
    return {"trusted_key": key.public_key}


def records_missing(d: Path, key: SigningKey) -> dict[str, Any]:
    (d / RECORDS).unlink()
    return {}


def incomplete(d: Path, key: SigningKey) -> dict[str, Any]:
    (d / COMPLETION).unlink()
    return {}


def completion_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    (d / COMPLETION).write_bytes(b'{"recordCount": 7')
    return {}


def duplicate_key(d: Path, key: SigningKey) -> dict[str, Any]:
    # The signed bytes name "text" twice: one reader could show the first value, another the last.
    def twice(index: int, row: dict[str, Any]) -> bytes:
        body = canonical_json(row)
        if index != 1:
            return body
        return body.replace(b'"text":', b'"text":"what the grader sees","text":', 1)

    forge(d, key, encode_line=twice)
    return {}


def non_canonical_json(d: Path, key: SigningKey) -> dict[str, Any]:
    def spaced(index: int, row: dict[str, Any]) -> bytes:
        body = canonical_json(row)
        return json.dumps(row, sort_keys=True).encode() if index == 2 else body

    forge(d, key, encode_line=spaced)
    return {}


def run_id_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    def foreign(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[3]["runId"] = "sr-" + "2" * 32
        return rows

    forge(d, key, records=foreign)
    return {}


def record_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    def extra(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[1]["note"] = "an envelope field nobody declared"
        return rows

    forge(d, key, records=extra)
    return {}


def sequence_gap(d: Path, key: SigningKey) -> dict[str, Any]:
    lines = record_lines(d)
    del lines[2]  # delete a record in the middle
    write_record_lines(d, lines)
    return {}


def duplicate_event_id(d: Path, key: SigningKey) -> dict[str, Any]:
    def duplicate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows.insert(3, json.loads(json.dumps(rows[2])))
        for index, row in enumerate(rows):
            row["logicalSequence"] = index  # a careful forger renumbers, but reuses the id
        return rows

    forge(d, key, records=duplicate)
    return {}


def event_id_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    def rename(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[2]["eventId"] = "my-own-id"  # unique, so only the <runId>:<sequence> rule sees it
        return rows

    forge(d, key, records=rename)
    return {}


def elapsed_decreasing(d: Path, key: SigningKey) -> dict[str, Any]:
    def backwards(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[3]["elapsedNanos"] = rows[2]["elapsedNanos"] - 1
        return rows

    forge(d, key, records=backwards)
    return {}


def observed_at_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    def local_time(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[4]["observedAt"] = "2025-01-31 13:00:00+01:00"
        return rows

    forge(d, key, records=local_time)
    return {}


def checkpoint_producer_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    def from_router(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[-1]["producer"] = "router"  # a checkpoint that claims another author
        return rows

    forge(d, key, records=from_router)
    return {}


def manifest_digest_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    manifest = json.loads((d / MANIFEST).read_bytes())
    manifest["metadata"]["purpose"] = "rewritten"
    (d / MANIFEST).write_bytes(canonical_json(manifest))
    return {}


def chain_broken(d: Path, key: SigningKey) -> dict[str, Any]:
    _edit_line(d, 2, lambda row: row["event"].update(n=99))  # edit a field in the middle
    return {}


def undeclared_tag(d: Path, key: SigningKey) -> dict[str, Any]:
    forge(d, key, records=_set_event("tag", "test.unused/v1", 2))
    return {"catalog": EventCatalog.make(Said, Counted, Unused)}


def event_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    forge(d, key, records=_set_event("n", "not a number", 2))
    return {}


def checkpoint_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    def recount(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[-1]["event"]["recordCount"] = 3
        return rows

    forge(d, key, records=recount, resign_checkpoints=False)
    return {}


def checkpoint_signature_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    def resign(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        event = rows[-1]["event"]
        signed = LedgerCheckpoint.signed_bytes(RUN_ID, event["recordCount"], event["headDigest"])
        event["signature"] = SigningKey.generate().sign(signed)
        return rows

    forge(d, key, records=resign, resign_checkpoints=False)
    return {}


def torn_tail(d: Path, key: SigningKey) -> dict[str, Any]:
    data = (d / RECORDS).read_bytes()
    (d / RECORDS).write_bytes(data[:-40])  # truncate mid-line
    return {}


def record_count_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    write_record_lines(d, record_lines(d)[:-1])  # delete the last record
    return {}


def head_digest_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    _edit_line(d, -1, lambda row: row.update(observedAt="2030-01-01T00:00:00.000000Z"))  # last
    return {}


def records_digest_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    forge(d, key, completion=lambda c: c.update(recordsSha256="0" * 64))
    return {}


def signature_invalid(d: Path, key: SigningKey) -> dict[str, Any]:
    # completion.json re-signed by another key; the manifest still names the original one.
    forge(d, SigningKey.generate(), resign_checkpoints=False)
    return {}


def receipt_mismatch(d: Path, key: SigningKey) -> dict[str, Any]:
    # The key holder rewrote one record and re-signed: the ledger verifies, its receipt does not.
    completion = json.loads((d / COMPLETION).read_bytes())
    manifest = json.loads((d / MANIFEST).read_bytes())
    receipt = {
        "runId": manifest["runId"],
        "records": completion["recordCount"],
        "headDigest": completion["headDigest"],
        "publicKey": manifest["publicKey"],
        "receipt": "complete",
    }
    forge(d, key, records=lambda rows: [*rows[:-2], {**rows[-2], "producer": "forger"}, rows[-1]])
    return {"receipt": receipt}


SCENARIOS: dict[str, Scenario] = {
    "manifest-missing": manifest_missing,
    "manifest-invalid": manifest_invalid,
    "format-unsupported": format_unsupported,
    "definition-mismatch": definition_mismatch,
    "catalog-mismatch": catalog_mismatch,
    "key-not-trusted": key_not_trusted,
    "records-missing": records_missing,
    "incomplete": incomplete,
    "completion-invalid": completion_invalid,
    "duplicate-key": duplicate_key,
    "non-canonical-json": non_canonical_json,
    "run-id-mismatch": run_id_mismatch,
    "record-invalid": record_invalid,
    "sequence-gap": sequence_gap,
    "duplicate-event-id": duplicate_event_id,
    "event-id-invalid": event_id_invalid,
    "elapsed-decreasing": elapsed_decreasing,
    "observed-at-invalid": observed_at_invalid,
    "manifest-digest-mismatch": manifest_digest_mismatch,
    "chain-broken": chain_broken,
    "undeclared-tag": undeclared_tag,
    "event-invalid": event_invalid,
    "checkpoint-producer-invalid": checkpoint_producer_invalid,
    "checkpoint-mismatch": checkpoint_mismatch,
    "checkpoint-signature-invalid": checkpoint_signature_invalid,
    "torn-tail": torn_tail,
    "record-count-mismatch": record_count_mismatch,
    "head-digest-mismatch": head_digest_mismatch,
    "records-digest-mismatch": records_digest_mismatch,
    "signature-invalid": signature_invalid,
    "receipt-mismatch": receipt_mismatch,
}


def test_every_verification_reason_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(VERIFICATION_REASONS)


@pytest.mark.parametrize("reason", sorted(SCENARIOS))
def test_damage_is_refused_with_its_reason(reason: str, ledger_dir: Path, key: SigningKey) -> None:
    open_ledger_artifacts(catalog, ledger_dir, trusted_key=key.public_key)  # valid before
    options = {"catalog": catalog, **SCENARIOS[reason](ledger_dir, key)}
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(ledger_dir=ledger_dir, **options)
    assert caught.value.reason == reason, caught.value.detail
    assert caught.value.detail


@pytest.mark.parametrize(
    ("tampering", "reason"),
    [
        (lambda lines: [*lines[:2], lines[3], lines[2], *lines[4:]], "sequence-gap"),  # reorder
        (lambda lines: [*lines[:3], lines[2], *lines[3:]], "sequence-gap"),  # duplicate
        (lambda lines: [*lines[:-1], lines[-1][:-1]], "torn-tail"),  # drop the final newline
        (lambda lines: [*lines, lines[-1]], "sequence-gap"),  # replay the last record
    ],
    ids=["reorder", "duplicate", "newline-dropped", "replayed"],
)
def test_moving_records_around_is_refused(
    ledger_dir: Path, tampering: Callable[[list[bytes]], list[bytes]], reason: str
) -> None:
    write_record_lines(ledger_dir, tampering(record_lines(ledger_dir)))
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir)
    assert caught.value.reason == reason


def test_recomputing_every_digest_without_the_key_is_caught_by_a_signature(
    ledger_dir: Path,
) -> None:
    attacker = SigningKey.generate()  # the manifest still names the real key
    forge(ledger_dir, attacker, records=_set_event("text", "forged", 1))
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir)
    assert caught.value.reason == "checkpoint-signature-invalid"


def test_a_self_consistent_forgery_passes_self_verification_but_not_a_pinned_key(
    ledger_dir: Path, key: SigningKey
) -> None:
    forge(
        ledger_dir,
        SigningKey.generate(),
        records=_set_event("text", "forged", 1),
        set_public_key=True,
    )
    forged = open_ledger_artifacts(catalog, ledger_dir)
    assert forged.signature == "self"  # integrity only: whoever signed it, it is intact
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir, trusted_key=key.public_key)
    assert caught.value.reason == "key-not-trusted"


def test_the_failing_record_is_named(ledger_dir: Path) -> None:
    chain_broken(ledger_dir, SigningKey.generate())
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir)
    assert caught.value.record == 3  # the record after the edited one no longer chains
    assert "record 3" in caught.value.detail


def test_a_manifest_that_is_not_json_is_invalid(ledger_dir: Path) -> None:
    (ledger_dir / MANIFEST).write_bytes(b"not json")
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir)
    assert caught.value.reason == "manifest-invalid"


def test_a_completion_for_another_run_is_refused(ledger_dir: Path, key: SigningKey) -> None:
    forge(ledger_dir, key, completion=lambda c: c.update(runId="sr-" + "3" * 32))
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir)
    assert caught.value.reason == "run-id-mismatch"


def test_a_strict_catalog_must_equal_the_declared_tags(ledger_dir: Path) -> None:
    larger = EventCatalog.make(Said, Counted, Unused)
    assert len(open_ledger_artifacts(larger, ledger_dir)) == 7  # more classes are safe
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(larger, ledger_dir, strict_catalog=True)
    assert caught.value.reason == "catalog-mismatch"
    assert len(open_ledger_artifacts(catalog, ledger_dir, strict_catalog=True)) == 7


def test_a_pinned_key_may_be_pem_or_a_key_file(ledger_dir: Path, key: SigningKey) -> None:
    key_file = ledger_dir.parent / "signer.pem"
    key_file.write_bytes(key.private_pem())
    assert open_ledger_artifacts(catalog, ledger_dir, trusted_key=key_file).signature == "pinned"
    public_file = ledger_dir.parent / "signer.pub"
    public_file.write_text(key.public_key)
    assert open_ledger_artifacts(catalog, ledger_dir, trusted_key=public_file).signature == "pinned"


@pytest.mark.parametrize("value", ["2", 2.0, True], ids=["string", "float", "bool"])
def test_an_event_value_that_only_coercion_would_accept_is_invalid(
    ledger_dir: Path, key: SigningKey, value: Any
) -> None:
    # Lax validation would read "2" as the integer 2: a grader and a JSON reader would disagree.
    forge(ledger_dir, key, records=_set_event("n", value, 2))
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir, trusted_key=key.public_key)
    assert caught.value.reason == "event-invalid" and caught.value.record == 2


def test_a_broken_chain_names_lines_as_an_editor_numbers_them(
    ledger_dir: Path, key: SigningKey
) -> None:
    chain_broken(ledger_dir, key)  # record 2 (line 3) edited: record 3 (line 4) no longer chains
    with pytest.raises(LedgerVerificationError) as caught:
        open_ledger_artifacts(catalog, ledger_dir)
    assert caught.value.reason == "chain-broken"
    assert caught.value.detail.startswith("record 3 (line 4 of records.ndjson)")
    assert "record 2 (line 3) hashes to" in caught.value.detail
