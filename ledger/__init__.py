"""The evidence layer: events, catalogs, the durable signed ledger and its offline verification."""

from ledger.artifacts import LedgerArtifacts, open_ledger_artifacts
from ledger.errors import (
    CatalogError,
    LedgerCompletionConflict,
    LedgerEncodingError,
    LedgerError,
    LedgerExistsError,
    LedgerVerificationError,
    LedgerWriteError,
)
from ledger.events import Event, EventCatalog
from ledger.format import LedgerCheckpoint, Provenance, RecordEnvelope, ledger_directory
from ledger.reasons import VERIFICATION_REASONS, verification_reasons
from ledger.records import LedgerReceipt, Record, ledger_catalog
from ledger.signing import SigningKey
from ledger.storage import DurableFiles
from ledger.verification import LedgerStop, verify_ledger
from ledger.writer import LedgerWriter, open_ledger_writer

__all__ = [
    "VERIFICATION_REASONS",
    "CatalogError",
    "DurableFiles",
    "Event",
    "EventCatalog",
    "LedgerArtifacts",
    "LedgerCheckpoint",
    "LedgerCompletionConflict",
    "LedgerEncodingError",
    "LedgerError",
    "LedgerExistsError",
    "LedgerReceipt",
    "LedgerStop",
    "LedgerVerificationError",
    "LedgerWriteError",
    "LedgerWriter",
    "Provenance",
    "Record",
    "RecordEnvelope",
    "SigningKey",
    "ledger_catalog",
    "ledger_directory",
    "open_ledger_artifacts",
    "open_ledger_writer",
    "verification_reasons",
    "verify_ledger",
]
