"""The offline view of a finished (or, on request, crashed) ledger: verified, immutable."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, overload

from ledger.events import Event, EventCatalog
from ledger.format import Completion, Manifest
from ledger.receipts import ReceiptClaim
from ledger.records import LedgerReceipt, Record
from ledger.signing import load_trusted_key
from ledger.verification import LedgerStop, SignatureMode, SignedBy, verify_ledger

E = TypeVar("E", bound=Event)


@dataclass(frozen=True, slots=True, eq=False)
class LedgerArtifacts:
    """Every record of a verified ledger, typed. Iterate it as often as you like.

    ``complete`` is False only for a view opened with ``allow_incomplete=True`` on a ledger without
    completion.json; ``stop`` then says where and why its verified prefix ends, and
    ``signed_records`` how many records a signature covers (``records[signed_records:]`` only
    chain to them: anyone could have appended those lines).
    """

    directory: Path
    manifest: Manifest
    completion: Completion | None
    records: tuple[Record, ...]
    signature: SignatureMode
    """"pinned": signed by the trusted key you passed (proves origin); "self": by the key the
    manifest names (proves integrity only); "unsigned": no signature covers any record (an
    incomplete ledger without a checkpoint). Either way only ``records[:signed_records]``."""
    signed_records: int
    signed_by: SignedBy | None
    """completion.json's signature (every record) or the last checkpoint's (a prefix)."""
    last_checkpoint: int | None
    stop: LedgerStop | None
    _by_class: Mapping[type[Event], tuple[Record, ...]] = field(repr=False)

    @property
    def complete(self) -> bool:
        return self.completion is not None

    @property
    def unsigned_records(self) -> int:
        return len(self.records) - self.signed_records

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def definition_id(self) -> str:
        return self.manifest.definition_id

    @property
    def public_key(self) -> str:
        return self.manifest.public_key

    @property
    def metadata(self) -> Mapping[str, Any]:
        return MappingProxyType(self.manifest.metadata)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    @overload
    def __getitem__(self, index: int) -> Record: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Record, ...]: ...
    def __getitem__(self, index: int | slice) -> Record | tuple[Record, ...]:
        return self.records[index]

    def records_of(self, event_class: type[Event]) -> Iterator[Record]:
        """Records whose event is an instance of ``event_class``, in ledger order."""
        groups = [group for cls, group in self._by_class.items() if issubclass(cls, event_class)]
        if len(groups) == 1:
            return iter(groups[0])
        return heapq.merge(*groups, key=lambda record: record.sequence)

    def events(self, event_class: type[E]) -> Iterator[E]:
        """Events of ``event_class`` (subclasses included), in ledger order."""
        for record in self.records_of(event_class):
            yield record.event  # type: ignore[misc]  # records_of selected instances of E

    def tags(self) -> Mapping[str, int]:
        """How many records each tag has."""
        counts: dict[str, int] = {}
        for cls, group in self._by_class.items():
            counts[cls.tag] = len(group)
        return MappingProxyType(dict(sorted(counts.items())))


def open_ledger_artifacts(
    catalog: EventCatalog,
    ledger_dir: Path | str,
    expected_definition_id: str | None = None,
    trusted_key: str | Path | None = None,
    *,
    strict_catalog: bool = False,
    allow_incomplete: bool = False,
    receipt: ReceiptClaim | LedgerReceipt | Mapping[str, Any] | None = None,
) -> LedgerArtifacts:
    """Verify the ledger at ``ledger_dir`` and return its typed records.

    Raises ``LedgerVerificationError`` (with a ``reason`` from ``VERIFICATION_REASONS``) on the
    first failed check. ``trusted_key`` is the text of a public key (``ed25519:<base64>`` or PEM)
    or a path to a file holding one; without it the signature is checked against the key the
    manifest names. ``strict_catalog`` demands that the catalog holds exactly the tags the ledger
    declares (plus the ledger's own), instead of at least them. ``receipt`` (the run's
    ``LedgerReceipt`` or its result line) binds the ledger to the run that returned it: its run
    id, record count, head digest, public key and completeness must match (``receipt-mismatch``).
    """
    if isinstance(trusted_key, Path):
        trusted_key = load_trusted_key(trusted_key)
    verified = verify_ledger(
        catalog,
        ledger_dir,
        expected_definition_id=expected_definition_id,
        trusted_key=trusted_key,
        strict_catalog=strict_catalog,
        allow_incomplete=allow_incomplete,
        receipt=None if receipt is None else ReceiptClaim.of(receipt),
    )
    records: list[Record] = []
    by_class: dict[type[Event], list[Record]] = {}
    for envelope, event in zip(verified.envelopes, verified.events, strict=True):
        assert event is not None  # require_catalog=True decodes every event
        record = Record(envelope, event)
        records.append(record)
        by_class.setdefault(type(event), []).append(record)
    return LedgerArtifacts(
        directory=verified.directory,
        manifest=verified.manifest,
        completion=verified.completion,
        records=tuple(records),
        signature=verified.signature,
        signed_records=verified.signed_records,
        signed_by=verified.signed_by,
        last_checkpoint=verified.last_checkpoint,
        stop=verified.stop,
        _by_class=MappingProxyType({cls: tuple(group) for cls, group in by_class.items()}),
    )
