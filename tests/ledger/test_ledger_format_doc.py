"""The normative format document and the code agree where a clean-room verifier found they did
not: null in optional strings, a checkpoint-only signature on line 0, and the core events' fields
(generated into the document, and held equal to the code here)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from ledger_testkit import forge
from real_runs import ROOT, society_run
from test_ledger_cli import society

from controller.agents.shipped import shipped_runtime_catalogs
from controller.cli.schema_export import check_format_doc, event_tables
from controller.events import core_events
from ledger import SigningKey
from ledger.event_tables import CORE, RUNTIMES, between_markers, catalog_markdown
from ledger.format import COMPLETION, Manifest, Provenance, RecordEnvelope

FORMAT_DOC = ROOT / "docs" / "ledger-format.md"


def test_the_format_document_carries_the_core_events_tables_the_code_generates() -> None:
    text = FORMAT_DOC.read_text(encoding="utf-8")
    documented = between_markers(text, CORE)
    assert documented is not None, "docs/ledger-format.md lacks the core-events markers"
    assert documented == catalog_markdown(core_events), "run `society ledger schemas` to regenerate"
    for tag in core_events.tags:
        assert f"#### `{tag}`" in documented
    runtimes = between_markers(text, RUNTIMES)
    assert runtimes is not None and runtimes == event_tables()[RUNTIMES]
    for catalog in shipped_runtime_catalogs().values():
        assert all(f"#### `{tag}`" in runtimes for tag in catalog.tags)
    assert check_format_doc() == []


def test_every_nullable_optional_field_is_documented_as_null_or_absent() -> None:
    text = FORMAT_DOC.read_text(encoding="utf-8")
    for model in (Manifest, Provenance, RecordEnvelope):
        for name, field in model.model_fields.items():
            if field.is_required() or field.default is not None:
                continue
            wire = field.alias or name
            (row,) = [line for line in text.splitlines() if re.search(rf"`{wire}`.*optional", line)]
            assert "`null`" in row, f"docs/ledger-format.md does not say {wire} may be null: {row}"


@pytest.fixture(scope="module")
def signed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SigningKey]:
    folder = tmp_path_factory.mktemp("format-doc")
    key = SigningKey.generate()
    (folder / "operator.pem").write_bytes(key.private_pem())
    line = society_run(folder / "artifacts", folder / "operator.pem")
    return folder / "artifacts" / line["runId"] / "ledger" / "main", key


@pytest.fixture
def ledger_copy(signed_run: tuple[Path, SigningKey], tmp_path: Path) -> Path:
    copy = tmp_path / "ledger"
    shutil.copytree(signed_run[0], copy)
    return copy


def _verify(capsys: Any, *argv: str) -> dict[str, Any]:
    assert society("ledger", "verify", *argv) == 0, capsys.readouterr().out
    line: dict[str, Any] = json.loads(capsys.readouterr().out)
    return line


def test_a_checkpoint_on_line_0_alone_leaves_the_ledger_unsigned_never_pinned(
    signed_run: tuple[Path, SigningKey], ledger_copy: Path, tmp_path: Path, capsys: Any
) -> None:
    key = signed_run[1]

    def checkpoint_only(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        last = [row for row in rows if row["event"]["tag"] == "ledger.checkpoint/v1"][-1]
        return [{**last, "logicalSequence": 0, "eventId": f"{last['runId']}:0"}]

    forge(ledger_copy, key, records=checkpoint_only)
    (ledger_copy / COMPLETION).unlink()
    pub = tmp_path / "operator.pub"
    pub.write_text(key.public_key)
    line = _verify(capsys, str(ledger_copy), "--allow-incomplete", "--trusted-key", str(pub))
    assert line["records"] == 1 and line["lastCheckpoint"] == 0
    assert (line["signature"], line["signedBy"], line["signedRecords"]) == ("unsigned", None, 0)
    assert line["unsignedRecords"] == 1


def test_null_optional_strings_verify_as_the_document_says(
    signed_run: tuple[Path, SigningKey], ledger_copy: Path, capsys: Any
) -> None:
    def nulls(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[1]["causationId"] = None
        rows[2]["correlationId"] = None
        return rows

    def no_commit(manifest: dict[str, Any]) -> None:
        manifest["provenance"]["gitCommit"] = None

    forge(ledger_copy, signed_run[1], records=nulls, manifest=no_commit)
    assert b'"causationId":null' in (ledger_copy / "records.ndjson").read_bytes()
    assert _verify(capsys, str(ledger_copy))["valid"] is True
