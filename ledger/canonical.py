"""Canonical JSON: the one byte form every ledger file uses (sorted keys, UTF-8, no spaces)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` as canonical JSON bytes; NaN and infinities are refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
