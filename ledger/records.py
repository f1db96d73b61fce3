"""Records as readers see them: the envelope plus its typed event, and the ledger receipt."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ledger.events import Event, EventCatalog
from ledger.format import LedgerCheckpoint, RecordEnvelope, _Wire

ledger_catalog = EventCatalog.make(LedgerCheckpoint)
"""The events the ledger itself writes; merged into every ledger's catalog."""


class Record:
    """One committed record: its envelope as written and its event as a typed object. Immutable."""

    __slots__ = ("_envelope", "_wire", "event")

    _envelope: RecordEnvelope | None
    _wire: Mapping[str, Any]
    event: Event

    def __init__(self, envelope: RecordEnvelope, event: Event) -> None:
        object.__setattr__(self, "_envelope", envelope)
        object.__setattr__(self, "_wire", {})
        object.__setattr__(self, "event", event)

    @classmethod
    def from_trusted_wire(cls, wire: Mapping[str, Any], event: Event) -> Record:
        """A record its writer just encoded; the envelope model is built only if asked for."""
        record = cls.__new__(cls)
        object.__setattr__(record, "_envelope", None)
        object.__setattr__(record, "_wire", wire)
        object.__setattr__(record, "event", event)
        return record

    @property
    def envelope(self) -> RecordEnvelope:
        envelope = self._envelope
        if envelope is None:
            envelope = RecordEnvelope.model_validate(self._wire)
            object.__setattr__(self, "_envelope", envelope)
        return envelope

    @property
    def sequence(self) -> int:
        if self._envelope is None:
            return int(self._wire["logicalSequence"])
        return self._envelope.logical_sequence

    @property
    def event_id(self) -> str:
        if self._envelope is None:
            return str(self._wire["eventId"])
        return self._envelope.event_id

    @property
    def producer(self) -> str:
        if self._envelope is None:
            return str(self._wire["producer"])
        return self._envelope.producer

    @property
    def tag(self) -> str:
        return type(self.event).tag

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Record is immutable; cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self.envelope == other.envelope and self.event == other.event

    __hash__ = None  # type: ignore[assignment]  # equal records need not hash alike (dict fields)

    def __repr__(self) -> str:
        return f"Record(sequence={self.sequence}, producer={self.producer!r}, event={self.event!r})"


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
        envelope = RecordEnvelope.model_validate_json(line)
        yield Record(envelope, catalog.decode(envelope.event))
