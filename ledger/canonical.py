"""Canonical JSON: the one byte form every ledger file uses (sorted keys, UTF-8, no spaces)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any


def _dumps(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _prebuilt_encoder() -> Callable[[Any], str]:
    """``json.dumps`` builds a new C encoder per call with these options; build it once instead.

    Falls back to ``json.dumps`` where the C encoder is missing or encodes differently.
    """
    try:
        from json.encoder import (  # type: ignore[attr-defined]
            c_make_encoder,
            encode_basestring,
        )

        if c_make_encoder is None:
            return _dumps
        encoder = c_make_encoder(
            None, _refuse, encode_basestring, None, ":", ",", True, False, False
        )

        def encode(value: Any) -> str:
            return "".join(encoder(value, 0))

        probe = {"b": [1, 2.5, -0.0, None, True], "a": {"z": 'é\u2603\n"', "y": 10**30}}
        if encode(probe) != _dumps(probe):
            return _dumps
        return encode
    except Exception:  # any surprise in the C encoder's private signature: use the public path
        return _dumps


_encode = _prebuilt_encoder()


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` as canonical JSON bytes; NaN and infinities are refused."""
    return _encode(value).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
