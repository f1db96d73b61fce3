"""The files a run keeps beside its ledger: ``run.json`` (what ran, by which controller) and
``result.json`` (the result line), and what the ledger on disk says about itself."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import LedgerError
from ledger.format import COMPLETION, MANIFEST, RECORDS
from ledger.run_artifacts import locate_ledger

RUN_FILE = "run.json"
"""Written by ``prepare``: the request (no secrets) and the controller's pid."""
RESULT_FILE = "result.json"
"""Written by ``society run`` when it ends: the result line and its cause."""


def run_directory(artifact_root: str | Path, run_id: str) -> Path:
    return Path(artifact_root) / run_id


def write_run_record(directory: Path, record: dict[str, Any]) -> None:
    (directory / RUN_FILE).write_text(json.dumps(record), encoding="utf-8")


def run_record(artifact_root: str | Path, run_id: str) -> dict[str, Any]:
    return _json_file(run_directory(artifact_root, run_id) / RUN_FILE)


def write_result(artifact_root: str | Path, run_id: str, document: dict[str, Any]) -> None:
    directory = run_directory(artifact_root, run_id)
    if directory.is_dir():
        (directory / RESULT_FILE).write_text(json.dumps(document) + "\n", encoding="utf-8")


def finished_result(artifact_root: str | Path, run_id: str) -> dict[str, Any]:
    return _json_file(run_directory(artifact_root, run_id) / RESULT_FILE)


@dataclass(frozen=True, slots=True)
class LedgerState:
    directory: str | None
    complete: bool
    records: int
    public_key: str | None
    head_digest: str | None = None


def read_ledger_state(run_dir: Path) -> LedgerState:
    """What the run's ledger on disk says about itself (not a verification)."""
    try:
        directory, located_run = locate_ledger(run_dir)
    except LedgerError:  # several ledgers, none of them the default
        return LedgerState(None, False, 0, None)
    if located_run is None or not (directory / MANIFEST).exists():  # none under ledger/ yet
        return LedgerState(None, False, 0, None)
    public_key = _json_file(directory / MANIFEST).get("publicKey")
    completion = _json_file(directory / COMPLETION)
    if "recordCount" in completion:
        head = completion.get("headDigest")
        return LedgerState(
            str(directory), True, int(completion["recordCount"]), public_key,
            head if isinstance(head, str) else None,
        )  # fmt: skip
    try:
        data = (directory / RECORDS).read_bytes()
    except OSError:
        data = b""
    return LedgerState(str(directory), False, data.count(b"\n"), public_key, _head(data))


def _head(records: bytes) -> str | None:
    """SHA-256 of the last complete line of records.ndjson (None when there is none)."""
    end = records.rfind(b"\n")
    if end < 0:
        return None
    return hashlib.sha256(records[records.rfind(b"\n", 0, end) + 1 : end]).hexdigest()


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
