"""A ledger bound to the receipt its run returned: `society ledger verify --receipt` and
``open_ledger_artifacts(receipt=...)`` refuse another run's ledger, an edited receipt, and a ledger
that the holder of the operator key rewrote and re-signed (it verifies "pinned" on its own)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from ledger_testkit import forge
from real_runs import society_run
from test_ledger_cli import society

from controller.cli.ledger_catalogs import reader_catalog
from ledger import LedgerError, LedgerVerificationError, SigningKey
from ledger import open_ledger_artifacts as open_ledger
from ledger.receipts import ReceiptClaim, read_receipt


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Path, Path]:
    """Two real runs of examples/hello.py signed with one operator key: (artifacts, first run's
    result line, second run's directory, the key file)."""
    folder = tmp_path_factory.mktemp("receipts")
    key = folder / "operator.pem"
    key.write_bytes(SigningKey.generate().private_pem())
    artifacts = folder / "artifacts"
    first = society_run(artifacts, key)
    second = society_run(artifacts, key)
    return artifacts, first, artifacts / second["runId"], key


@pytest.fixture
def run_dir(two_runs: tuple[Path, dict[str, Any], Path, Path], tmp_path: Path) -> Path:
    artifacts, first, _, _ = two_runs
    copy = tmp_path / first["runId"]
    shutil.copytree(artifacts / first["runId"], copy)
    return copy


def _verify(capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    code = society("ledger", "verify", *argv)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return code, json.loads(lines[0])


def test_the_result_line_carries_the_head_digest_the_ledger_ends_with(
    two_runs: tuple[Path, dict[str, Any], Path, Path], run_dir: Path
) -> None:
    _, first, _, _ = two_runs
    completion = json.loads((run_dir / "ledger" / "main" / "completion.json").read_bytes())
    assert first["headDigest"] == completion["headDigest"] and first["receipt"] == "complete"
    assert json.loads((run_dir / "result.json").read_bytes())["headDigest"] == first["headDigest"]


def test_verify_with_the_runs_own_receipt_says_it_matched_from_a_file_or_the_line(
    two_runs: tuple[Path, dict[str, Any], Path, Path], run_dir: Path, capsys: Any
) -> None:
    _, first, _, _ = two_runs
    for receipt in (str(run_dir / "result.json"), json.dumps(first)):
        code, line = _verify(capsys, str(run_dir), "--receipt", receipt)
        assert code == 0 and line["valid"] is True and line["receipt"] == "matched", line


def test_another_runs_receipt_is_refused_though_both_ledgers_verify(
    two_runs: tuple[Path, dict[str, Any], Path, Path], run_dir: Path, capsys: Any
) -> None:
    _, _, second_dir, _ = two_runs
    assert _verify(capsys, str(second_dir))[0] == 0
    code, line = _verify(capsys, str(run_dir), "--receipt", str(second_dir / "result.json"))
    assert code == 1 and line["reason"] == "receipt-mismatch"
    assert "run id" in line["detail"]


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("records", 28, "record count"),
        ("headDigest", "0" * 64, "head digest"),
        ("publicKey", SigningKey.generate().public_key, "public key"),
        ("receipt", "incomplete", "completeness"),
    ],
    ids=["records", "headDigest", "publicKey", "receipt"],  # a fresh key is not an id
)
def test_an_edited_receipt_is_refused_naming_the_field(
    two_runs: tuple[Path, dict[str, Any], Path, Path],
    run_dir: Path,
    capsys: Any,
    field: str,
    value: Any,
    named: str,
) -> None:
    _, first, _, _ = two_runs
    edited = {**first, field: value if field != "records" else first["records"] - 1}
    code, line = _verify(capsys, str(run_dir), "--receipt", json.dumps(edited))
    assert code == 1 and line["reason"] == "receipt-mismatch", line
    assert named in line["detail"]


def test_a_ledger_the_key_holder_rewrote_verifies_pinned_alone_but_not_against_its_receipt(
    two_runs: tuple[Path, dict[str, Any], Path, Path], run_dir: Path, capsys: Any
) -> None:
    _, first, _, key_file = two_runs
    key = SigningKey.load(key_file)
    ledger = run_dir / "ledger" / "main"

    def reword(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for row in rows:
            parts = row["event"].get("parts")
            if parts == ["hello ben"]:
                row["event"]["parts"] = ["goodbye ben"]
        return rows

    forge(ledger, key, records=reword)
    assert b"goodbye ben" in (ledger / "records.ndjson").read_bytes()
    pub = run_dir.parent / "operator.pub"
    pub.write_text(key.public_key)
    code, alone = _verify(capsys, str(ledger), "--trusted-key", str(pub))
    assert code == 0 and alone["signature"] == "pinned" and alone["unsignedRecords"] == 0
    code, bound = _verify(
        capsys, str(ledger), "--trusted-key", str(pub), "--receipt", json.dumps(first)
    )
    assert code == 1 and bound["reason"] == "receipt-mismatch" and "head digest" in bound["detail"]
    with pytest.raises(LedgerVerificationError) as refused:
        open_ledger(reader_catalog(None), ledger, trusted_key=key.public_key, receipt=first)
    assert refused.value.reason == "receipt-mismatch"


def test_open_ledger_artifacts_binds_to_a_result_line_or_a_receipt_claim(
    two_runs: tuple[Path, dict[str, Any], Path, Path], run_dir: Path
) -> None:
    _, first, _, _ = two_runs
    ledger = run_dir / "ledger" / "main"
    opened = open_ledger(reader_catalog(None), ledger, receipt=first)
    assert opened.run_id == first["runId"] and len(opened) == first["records"]
    claim = read_receipt(run_dir / "result.json")
    assert isinstance(claim, ReceiptClaim) and claim.head_digest == first["headDigest"]
    assert len(open_ledger(reader_catalog(None), ledger, receipt=claim)) == first["records"]


def test_a_receipt_that_is_no_result_line_is_a_typed_input_error(
    run_dir: Path, capsys: Any
) -> None:
    for bad in ("{not json", json.dumps({"runId": "x"}), str(run_dir / "absent.json")):
        code, line = _verify(capsys, str(run_dir), "--receipt", bad)
        assert code == 1 and line["reason"] == "receipt-invalid", line
    with pytest.raises(LedgerError) as refused:
        ReceiptClaim.of({"runId": "x", "records": True, "headDigest": "h", "publicKey": "k"})
    assert refused.value.reason == "receipt-invalid"


def test_grade_with_a_receipt_grades_only_the_ledger_it_names(
    two_runs: tuple[Path, dict[str, Any], Path, Path], run_dir: Path, capsys: Any
) -> None:
    _, first, second_dir, _ = two_runs
    grader = Path(__file__).resolve().parents[2] / "examples" / "graders" / "hello.py"
    assert society("grade", str(grader), str(run_dir), "--receipt", json.dumps(first)) == 0
    assert json.loads(capsys.readouterr().out)["bothGreeted"] is True
    other = str(second_dir / "result.json")
    assert society("grade", str(grader), str(run_dir), "--receipt", other) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "receipt-mismatch"
