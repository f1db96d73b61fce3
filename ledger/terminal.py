"""Ledger text made safe for a terminal: no escape sequences, control or bidi characters."""

from __future__ import annotations

import json
from typing import Any

_BIDI = [
    0x061C,  # ALM
    0x200E,  # LRM
    0x200F,  # RLM
    *range(0x202A, 0x202F),  # LRE, RLE, PDF, LRO, RLO
    *range(0x2066, 0x206A),  # LRI, RLI, FSI, PDI
]
_LINE_BREAKS = [0x2028, 0x2029]
_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0)]  # C0 (ESC among them), DEL, C1

_AS_TEXT = str.maketrans(
    {code: f"\\x{code:02x}" for code in _CONTROLS}
    | {code: f"\\u{code:04x}" for code in _BIDI + _LINE_BREAKS}
)
_IN_JSON = str.maketrans({code: f"\\u{code:04x}" for code in _CONTROLS + _BIDI + _LINE_BREAKS})


def terminal_safe(text: str) -> str:
    """``text`` with every control, bidi and line-separator character written as an escape
    (``\\x1b``, ``\\u202e``), so ledger content cannot move the cursor, recolour the terminal or
    reorder what is shown."""
    return text.translate(_AS_TEXT)


def terminal_json(value: Any) -> str:
    """One line of JSON for ``value`` that a terminal shows as written: the same value as
    ``json.dumps``, with control and bidi characters as ``\\uXXXX`` escapes."""
    return escape_json_text(json.dumps(value, ensure_ascii=False))


def escape_json_text(text: str) -> str:
    """JSON text with control and bidi characters escaped; it still parses to the same value,
    because outside its strings JSON text holds no such characters."""
    return text.translate(_IN_JSON)
