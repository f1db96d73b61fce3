"""A run's ledger as the viewers need it: verified (or why not), and its records made compact.

A compact record is ``[sequence, elapsed µs, producer index, tag index, event fields]``: the run
id, event id, digests and wall-clock text every envelope repeats are left out (the verification
result stands for them), so a page embeds a ledger in well under its own size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.events import core_events
from controller.modelgateway.events import model_gateway_catalog
from ledger import EventCatalog, LedgerError
from ledger.format import MANIFEST, RECORDS
from ledger.run_artifacts import locate_ledger
from ledger.verification import verify_ledger

LEDGER_GLOB = f"ledger/*/{MANIFEST}"


@dataclass(slots=True)
class CompactLedger:
    """Records in compact form, with the producer and tag tables they index."""

    producers: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    _producer_index: dict[str, int] = field(default_factory=dict)
    _tag_index: dict[str, int] = field(default_factory=dict)

    def add(self, wire: dict[str, Any]) -> list[Any]:
        """Add one envelope in wire form (camelCase); returns its compact row."""
        event = dict(wire["event"])
        tag = str(event.pop("tag", "?"))
        row = [
            wire["logicalSequence"],
            int(wire["elapsedNanos"]) // 1000,
            self._index(str(wire["producer"]), self.producers, self._producer_index),
            self._index(tag, self.tags, self._tag_index),
            event,
        ]
        self.rows.append(row)
        return row

    @staticmethod
    def _index(value: str, table: list[str], index: dict[str, int]) -> int:
        found = index.get(value)
        if found is None:
            found = index[value] = len(table)
            table.append(value)
        return found


@dataclass(frozen=True, slots=True)
class RunLedger:
    """What a viewer shows about one run's ledger."""

    directory: Path
    manifest: dict[str, Any]
    verification: dict[str, Any]
    """``{"status": "pinned"|"self"|"failed"|"incomplete", "reasons": [...], ...}``"""
    records: CompactLedger


def find_ledger(run_dir: Path) -> Path:
    """The ledger directory of a run directory or a ledger directory (``locate_ledger``), which
    must hold a manifest."""
    ledger_dir, _ = locate_ledger(run_dir)
    if not (ledger_dir / MANIFEST).is_file():
        raise LedgerError(
            f"{run_dir} holds no ledger (neither {MANIFEST} nor {LEDGER_GLOB}); pass a run "
            f"directory such as artifacts/sr-... or its ledger directory",
            reason="manifest-missing",
        )
    return ledger_dir


def read_run(run_dir: Path, *, trusted_key: str | None = None) -> RunLedger:
    """Verify the run's ledger and read its records; a ledger that fails verification is still
    read, as found, and its verification says ``failed`` with the reason."""
    directory = find_ledger(run_dir)
    catalog = EventCatalog.merge(core_events, model_gateway_catalog)
    compact = CompactLedger()
    try:
        verified = verify_ledger(
            catalog,
            directory,
            trusted_key=trusted_key,
            require_catalog=False,
            allow_incomplete=True,
        )
    except LedgerError as exc:
        verification: dict[str, Any] = {
            "status": "failed",
            "reasons": [{"reason": exc.reason, "detail": exc.detail}],
        }
        manifest = _json_object(directory / MANIFEST)
        for wire in _raw_rows(directory / RECORDS):
            compact.add(wire)
        return RunLedger(directory, manifest, verification, compact)
    for envelope in verified.envelopes:
        compact.add(envelope.to_wire())
    verification = {"status": verified.signature, "reasons": [], "records": len(compact.rows)}
    if verified.stop is not None:
        verification["status"] = "incomplete"
        verification["signature"] = verified.signature
        verification["reasons"] = [{"reason": verified.stop.reason, "detail": verified.stop.detail}]
    return RunLedger(directory, verified.manifest.to_wire(), verification, compact)


def _json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _raw_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(row, dict)
            and isinstance(row.get("event"), dict)
            and isinstance(row.get("logicalSequence"), int)
            and isinstance(row.get("elapsedNanos"), int)
        ):
            rows.append(row)
    return rows
