"""Ledger export to GCS, against fake-gcs-server (the GCS emulator built by
scripts/build-tools.sh) through the real ``google-cloud-storage`` client: completion.json is the
last object, a failed export leaves no final object and is reported, a retry resumes it, and
``society ledger verify`` / ``grade`` read an exported ledger."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gcs_emulator import FakeGcsServer
from ledger_testkit import chained_record, record_lines, write_ledger, write_record_lines

from controller.cli import ledger_commands
from controller.stores import gcs as gcs_ledger
from ledger import SigningKey
from ledger.format import COMPLETION

BUCKET = "society-ledgers"
RUN_ID = "sr-" + "1" * 32


@pytest.fixture
def gcs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGcsServer]:
    server = FakeGcsServer(tmp_path / "gcs")
    server.root.mkdir()
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    gcs_ledger.storage_client().create_bucket(BUCKET)
    try:
        yield server
    finally:
        server.kill()


def run_dir(tmp_path: Path, key: SigningKey, *, complete: bool = True) -> Path:
    """A run directory: its ledger under ledger/main and a service log beside it."""
    directory = tmp_path / RUN_ID
    write_ledger(directory / "ledger" / "main", 6, key=key, complete=complete)
    (directory / "model-server.log").write_text("a run service's log\n")
    return directory


def objects(prefix: str = RUN_ID + "/") -> dict[str, Any]:
    bucket = gcs_ledger.storage_client().bucket(BUCKET)
    return {blob.name: blob for blob in bucket.list_blobs(prefix=prefix)}


def society(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="society")
    ledger_commands.add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def last_line(out: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_a_complete_run_exports_every_file_with_completion_last_and_verifies_from_the_bucket(
    gcs: FakeGcsServer, tmp_path: Path, capsys: Any
) -> None:
    source = run_dir(tmp_path, SigningKey.generate())
    order: list[str] = []
    receipt = gcs_ledger.export_run(source, f"gs://{BUCKET}/{RUN_ID}", progress=order.append)
    assert receipt.complete and receipt.skipped == 0
    stored = objects()
    expected = {
        f"{RUN_ID}/{p.relative_to(source).as_posix()}" for p in source.rglob("*") if p.is_file()
    }
    assert set(stored) == expected
    for name, blob in stored.items():
        assert blob.download_as_bytes() == (source / name.split("/", 1)[1]).read_bytes()
    completion = stored[f"{RUN_ID}/ledger/main/{COMPLETION}"]
    others = [blob for name, blob in stored.items() if not name.endswith(COMPLETION)]
    # The server's own creation times, not our progress callback, say what came last.
    assert all(blob.time_created <= completion.time_created for blob in others)
    assert order[-1] == f"exported {RUN_ID}/ledger/main/{COMPLETION}"

    assert society("ledger", "verify", f"gs://{BUCKET}/{RUN_ID}") == 0
    line = last_line(capsys.readouterr().out)
    assert line["valid"] is True and line["signedBy"] == "completion" and line["records"] == 7


def test_a_failure_mid_export_is_reported_leaves_no_completion_and_a_retry_resumes(
    gcs: FakeGcsServer, tmp_path: Path, capsys: Any
) -> None:
    source = run_dir(tmp_path, SigningKey.generate())
    url = f"gs://{BUCKET}/{RUN_ID}"

    def kill_after_two(step: str) -> None:
        if len(objects_done) == 1:
            gcs.kill()
        objects_done.append(step)

    objects_done: list[str] = []
    with pytest.raises(gcs_ledger.LedgerExportError) as failed:
        gcs_ledger.export_run(source, url, deadline_s=3, progress=kill_after_two)
    assert failed.value.reason == "export-failed"
    assert "is unfinished" in str(failed.value) and "again to resume" in str(failed.value)
    gcs.start()  # the same objects on disk, as after an outage
    stored = objects()
    assert len(stored) == 2
    assert not any(name.endswith(COMPLETION) for name in stored)
    assert society("ledger", "verify", url) == 1
    assert last_line(capsys.readouterr().out)["reason"] == "export-unfinished"

    receipt = gcs_ledger.export_run(source, url)
    assert receipt.skipped == 2 and receipt.complete
    assert f"{RUN_ID}/ledger/main/{COMPLETION}" in objects()
    assert society("ledger", "verify", url) == 0


def test_an_incomplete_run_exports_its_signed_prefix_marked_incomplete(
    gcs: FakeGcsServer, tmp_path: Path, capsys: Any
) -> None:
    source = run_dir(tmp_path, SigningKey.generate(), complete=False)
    ledger_dir = source / "ledger" / "main"
    lines = len(record_lines(ledger_dir))  # 6 events, then the checkpoint that signs them
    unsigned = chained_record(ledger_dir, "mallory", "written after the last checkpoint")
    write_record_lines(ledger_dir, [*record_lines(ledger_dir), unsigned])
    receipt = gcs_ledger.export_run(source, f"gs://{BUCKET}/{RUN_ID}")
    assert not receipt.complete and receipt.signed_records == 6
    stored = objects()
    assert f"{RUN_ID}/ledger/main/{COMPLETION}" not in stored
    marker = stored[f"{RUN_ID}/{gcs_ledger.INCOMPLETE_MARKER}"]
    assert all(b.time_created <= marker.time_created for b in stored.values())
    assert json.loads(marker.download_as_bytes())["complete"] is False
    records = stored[f"{RUN_ID}/ledger/main/records.ndjson"].download_as_bytes()
    assert unsigned not in records and len(records.splitlines()) == lines

    url = f"gs://{BUCKET}/{RUN_ID}"
    assert society("ledger", "verify", url) == 1
    assert last_line(capsys.readouterr().out)["reason"] == "incomplete"
    assert society("ledger", "verify", "--allow-incomplete", url) == 0
    line = last_line(capsys.readouterr().out)
    assert line["complete"] is False and line["signedBy"] == "checkpoint"
    assert (line["signedRecords"], line["unsignedRecords"]) == (6, 1)  # the checkpoint's own line


def test_an_export_never_overwrites_another_runs_objects(
    gcs: FakeGcsServer, tmp_path: Path
) -> None:
    first = run_dir(tmp_path / "a", SigningKey.generate())
    second = run_dir(tmp_path / "b", SigningKey.generate())
    gcs_ledger.export_run(first, f"gs://{BUCKET}/{RUN_ID}")
    with pytest.raises(gcs_ledger.LedgerExportError) as refused:
        gcs_ledger.export_run(second, f"gs://{BUCKET}/{RUN_ID}")
    assert refused.value.reason == "export-conflict"


def test_grade_reads_an_exported_ledger(gcs: FakeGcsServer, tmp_path: Path, capsys: Any) -> None:
    source = run_dir(tmp_path, SigningKey.generate())
    gcs_ledger.export_run(source, f"gs://{BUCKET}/{RUN_ID}")
    grader = tmp_path / "grader.py"
    grader.write_text(
        "from ledger_testkit import Said, catalog\n"
        "def grade(ledger):\n    return {'said': sum(1 for _ in ledger.events(Said))}\n"
    )
    assert society("grade", str(grader), f"gs://{BUCKET}/{RUN_ID}/ledger/main") == 0
    assert last_line(capsys.readouterr().out) == {"said": 3}


def test_a_url_that_is_not_gs_is_a_typed_error() -> None:
    with pytest.raises(gcs_ledger.LedgerExportError) as bad:
        gcs_ledger.split_url("s3://bucket/x")
    assert bad.value.reason == "export-url-invalid"


def test_the_workers_export_step_follows_society_ledger_export_and_skips_runs_without_a_ledger(
    gcs: FakeGcsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = run_dir(tmp_path, SigningKey.generate())
    monkeypatch.delenv(gcs_ledger.EXPORT_ENV, raising=False)
    assert gcs_ledger.export_if_configured(source, RUN_ID) is None
    monkeypatch.setenv(gcs_ledger.EXPORT_ENV, f"gs://{BUCKET}")
    receipt = gcs_ledger.export_if_configured(source, RUN_ID)
    assert receipt is not None and receipt.url == f"gs://{BUCKET}/{RUN_ID}/"
    assert f"{RUN_ID}/ledger/main/{COMPLETION}" in objects()
    assert gcs_ledger.export_if_configured(tmp_path / "never-started", RUN_ID) is None
