"""Records as readers see them: the envelope plus its typed event, and the ledger receipt."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ledger.events import Event, EventCatalog
from ledger.format import LedgerCheckpoint, RecordEnvelope, _Wire

ledger_catalog = EventCatalog.make(LedgerCheckpoint)
"""The events the ledger itself writes; merged into every ledger's catalog."""


@dataclass(frozen=True, slots=True)
class Record:
    """One committed record: its envelope as written and its event as a typed object."""

    envelope: RecordEnvelope
    event: Event

    @property
    def sequence(self) -> int:
        return self.envelope.logical_sequence

    @property
    def event_id(self) -> str:
        return self.envelope.event_id

    @property
    def producer(self) -> str:
        return self.envelope.producer

    @property
    def tag(self) -> str:
        return type(self.event).tag


class LedgerReceipt(_Wire):
    """What a finished or interrupted writer can prove about its ledger."""

    ledger_dir: str
    run_id: str
    record_count: int
    head_digest: str
    public_key: str
    complete: bool


def parse_record_lines(catalog: EventCatalog, lines: Iterable[bytes]) -> Iterator[Record]:
    """Decode durable lines written by this process's writer (already trusted, not verified)."""
    for line in lines:
        envelope = RecordEnvelope.model_validate(json.loads(line))
        yield Record(envelope, catalog.decode(envelope.event))
