"""The evidence layer: events, catalogs, the durable signed ledger and its offline verification."""

from ledger.errors import (
    CatalogError,
    LedgerCompletionConflict,
    LedgerError,
    LedgerExistsError,
    LedgerVerificationError,
    LedgerWriteError,
)
from ledger.events import Event, EventCatalog
from ledger.format import LedgerCheckpoint, Provenance, RecordEnvelope, ledger_directory
from ledger.records import LedgerReceipt, Record, ledger_catalog
from ledger.signing import SigningKey
from ledger.storage import DurableFiles
from ledger.writer import LedgerWriter, open_ledger_writer

__all__ = [
    "CatalogError",
    "DurableFiles",
    "Event",
    "EventCatalog",
    "LedgerCheckpoint",
    "LedgerCompletionConflict",
    "LedgerError",
    "LedgerExistsError",
    "LedgerReceipt",
    "LedgerVerificationError",
    "LedgerWriteError",
    "LedgerWriter",
    "Provenance",
    "Record",
    "RecordEnvelope",
    "SigningKey",
    "ledger_catalog",
    "ledger_directory",
    "open_ledger_writer",
]
