"""Binding an opened ledger to the receipt a run returned: run id, record count, head digest, key.

A run's result line (``society run``'s JSON line, ``result.json`` beside its run directory) or its
``LedgerReceipt`` says which ledger the run wrote. A ledger that verifies on its own may still be
another run's, or this run's cut short and re-completed by someone holding its key; comparing it
with the receipt says whether it is the one the run handed over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import LedgerError, LedgerVerificationError
from ledger.records import LedgerReceipt

_MAX_RECEIPT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReceiptClaim:
    """What a receipt says about the ledger its run wrote."""

    run_id: str
    record_count: int
    head_digest: str
    public_key: str
    complete: bool

    @classmethod
    def of(cls, receipt: ReceiptClaim | LedgerReceipt | Mapping[str, Any]) -> ReceiptClaim:
        """From a ``LedgerReceipt``, or a result line (``runId``, ``records``, ``headDigest``,
        ``publicKey``, ``receipt``); raises ``LedgerError("receipt-invalid")``."""
        if isinstance(receipt, ReceiptClaim):
            return receipt
        if isinstance(receipt, LedgerReceipt):
            return cls(
                receipt.run_id,
                receipt.record_count,
                receipt.head_digest,
                receipt.public_key,
                receipt.complete,
            )
        return _from_result_line(receipt)


def _from_result_line(line: Mapping[str, Any]) -> ReceiptClaim:
    if not isinstance(line, Mapping):
        raise _invalid(f"a receipt is a JSON object (a result line), not {type(line).__name__}")
    fields = {"runId": str, "records": int, "headDigest": str, "publicKey": str}
    for name, kind in fields.items():
        value = line.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            got = "missing" if value is None else f"{str(value)[:80]!r}, not a {kind.__name__}"
            raise _invalid(
                f"the receipt's {name} is {got}; pass the result line `society run` printed (or "
                f"its run's result.json) unchanged"
            )
    state = line.get("receipt")
    if state not in ("complete", "incomplete"):
        raise _invalid(
            f"the receipt's receipt field is {str(state)[:40]!r}, not complete or incomplete"
        )
    return ReceiptClaim(
        line["runId"], line["records"], line["headDigest"], line["publicKey"], state == "complete"
    )


def read_receipt(text_or_path: str | Path) -> ReceiptClaim:
    """A receipt from a result line's text (starting with ``{``) or a file holding one."""
    text = str(text_or_path)
    if not isinstance(text_or_path, Path) and text.lstrip().startswith("{"):
        data = text.encode("utf-8", "surrogateescape")
    else:
        try:
            with open(text_or_path, "rb") as handle:
                data = handle.read(_MAX_RECEIPT_BYTES + 1)
        except OSError as exc:
            raise _invalid(f"cannot read the receipt {text}: {exc.strerror or exc}") from None
    if len(data) > _MAX_RECEIPT_BYTES:
        raise _invalid(f"the receipt {text[:80]} is over 1 MiB; a result line is one short line")
    try:
        line = json.loads(data.strip().splitlines()[-1] if data.strip() else b"")
    except (ValueError, RecursionError):
        raise _invalid(f"the receipt {text[:80]} is not a JSON result line") from None
    return ReceiptClaim.of(line)


def check_receipt(
    claim: ReceiptClaim,
    *,
    directory: Path,
    run_id: str,
    public_key: str,
    record_count: int,
    head_digest: str,
    complete: bool,
) -> None:
    """Raise ``LedgerVerificationError("receipt-mismatch")`` naming the first field that differs
    between a verified ledger and the receipt of the run that should have written it."""
    found = (
        ("run id", run_id, claim.run_id),
        ("record count", record_count, claim.record_count),
        ("head digest", head_digest, claim.head_digest),
        ("public key", public_key, claim.public_key),
        ("completeness", _state(complete), _state(claim.complete)),
    )
    for name, ledger_value, receipt_value in found:
        if ledger_value != receipt_value:
            raise LedgerVerificationError(
                f"{directory} has {name} {_short(ledger_value)}, the receipt says "
                f"{_short(receipt_value)}: this is not the ledger that run handed over (another "
                f"run's, or changed and re-signed); open the ledger the receipt names",
                reason="receipt-mismatch",
            )


def _state(complete: bool) -> str:
    return "complete" if complete else "incomplete"


def _short(value: object) -> str:
    text = str(value)
    return text[:16] + "…" if len(text) == 64 else text[:80]


def _invalid(detail: str) -> LedgerError:
    return LedgerError(detail, reason="receipt-invalid")
