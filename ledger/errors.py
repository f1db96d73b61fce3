"""Typed errors of the evidence layer; each carries a stable machine-readable ``reason``."""

from __future__ import annotations


class LedgerError(Exception):
    """Base class: ``reason`` is stable and machine-readable, the message says what to do next."""

    reason: str = "ledger-error"

    def __init__(self, detail: str, *, reason: str | None = None) -> None:
        super().__init__(detail)
        if reason is not None:
            self.reason = reason
        self.detail = detail


class CatalogError(LedgerError):
    """An event catalog could not be built, or an event is outside a closed catalog."""

    reason = "catalog-invalid"


class LedgerExistsError(LedgerError):
    """The ledger directory already exists; ledgers are never overwritten."""

    reason = "ledger-exists"


class LedgerWriteError(LedgerError):
    """A write failed; the writer is latched failed and accepts no further appends."""

    reason = "write-failed"


class LedgerEncodingError(LedgerError):
    """An event cannot become a ledger line (a lone surrogate, NaN, nesting deeper than the format
    allows); only that append fails, the writer goes on."""

    reason = "event-unencodable"


class LedgerCompletionConflict(LedgerError):
    """completion.json already exists with different bytes."""

    reason = "completion-conflict"


class LedgerVerificationError(LedgerError):
    """The ledger on disk does not verify; ``reason`` names the check (``VERIFICATION_REASONS``).

    ``record`` is the index of the offending record line when one is to blame.
    """

    reason = "verification-failed"

    def __init__(self, detail: str, *, reason: str, record: int | None = None) -> None:
        super().__init__(detail, reason=reason)
        self.record = record
