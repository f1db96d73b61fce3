"""Ledger format v1: the directory layout and the three files' shapes."""

from __future__ import annotations

import platform
import subprocess
import time
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from ledger.canonical import canonical_json
from ledger.events import Event

LEDGER_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
RECORDS = "records.ndjson"
COMPLETION = "completion.json"
GENESIS = "manifest"  # record 0's prevDigest is the SHA-256 of the manifest bytes

CHECKPOINT_EVERY_RECORDS = 1000
CHECKPOINT_EVERY_SECONDS = 5.0


class _Wire(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def canonical(self) -> bytes:
        return canonical_json(self.to_wire())


class Provenance(_Wire):
    package_version: str
    git_commit: str | None = None
    python_version: str
    profile: str

    @classmethod
    def current(cls, profile: str, source_dir: Path | None = None) -> Provenance:
        try:
            version = importlib_metadata.version("society-runner")
        except importlib_metadata.PackageNotFoundError:
            version = "0+unknown"
        return cls(
            package_version=version,
            git_commit=_git_commit(source_dir or Path(__file__).resolve().parent.parent),
            python_version=platform.python_version(),
            profile=profile,
        )


def _git_commit(directory: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else None


class Manifest(_Wire):
    ledger_format_version: int
    definition_id: str
    run_id: str
    ledger_ref: str
    catalog_tags: list[str]
    created_at: str
    provenance: Provenance
    metadata: dict[str, Any]
    public_key: str


class RecordEnvelope(_Wire):
    """One line of records.ndjson, with the event still as its wire object."""

    run_id: str
    event_id: str
    logical_sequence: int
    elapsed_nanos: int
    observed_at: str
    producer: str
    causation_id: str | None = None
    correlation_id: str | None = None
    prev_digest: str
    event: dict[str, Any]

    @property
    def tag(self) -> str:
        return str(self.event.get("tag", ""))


class Completion(_Wire):
    ledger_format_version: int
    run_id: str
    record_count: int
    manifest_sha256: str
    records_sha256: str
    head_digest: str
    signature: str

    UNSIGNED_FIELDS: ClassVar[frozenset[str]] = frozenset({"signature"})

    def signed_bytes(self) -> bytes:
        return canonical_json({k: v for k, v in self.to_wire().items() if k != "signature"})


class LedgerCheckpoint(Event):
    """A signed statement that the first ``record_count`` records end in ``head_digest``."""

    tag: ClassVar[str] = "ledger.checkpoint/v1"

    record_count: int
    head_digest: str
    signature: str

    @staticmethod
    def signed_bytes(run_id: str, record_count: int, head_digest: str) -> bytes:
        return canonical_json(
            {"runId": run_id, "recordCount": record_count, "headDigest": head_digest}
        )


_second_text: tuple[int, str] = (-1, "")


def utc_now() -> str:
    """Now as ``2025-01-31T12:00:00.123456Z`` (the seconds part is formatted once per second)."""
    global _second_text
    micros = time.time_ns() // 1000
    second, fraction = divmod(micros, 1_000_000)
    cached_second, text = _second_text
    if second != cached_second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_text = (second, text)
    return f"{text}.{fraction:06d}Z"


def ledger_directory(artifact_root: Path, namespace: str, ledger_ref: str) -> Path:
    return artifact_root / namespace / "ledger" / ledger_ref
