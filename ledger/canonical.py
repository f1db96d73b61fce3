"""Canonical JSON: the one byte form every ledger file uses (sorted keys, UTF-8, no spaces)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from json.encoder import encode_basestring  # the C version where there is one
from typing import Any, Literal

from pydantic_core import from_json

MAX_NESTING = 200
"""The deepest nesting of arrays and objects a ledger file or line may hold (the top level is 1)."""

FormProblem = Literal["not-json", "too-deep", "duplicate-key", "non-canonical"]


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
_quote: Callable[[str], str] = encode_basestring


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` as canonical JSON bytes; NaN and infinities are refused."""
    return _encode(value).encode("utf-8")


def canonical_text(value: Any) -> str:
    """``canonical_json`` before its UTF-8 encoding (for embedding in a larger canonical text)."""
    return _encode(value)


def json_string(text: str) -> str:
    """``text`` as the canonical encoder spells a JSON string (quoted, escaped, not ASCII-only)."""
    return _quote(text)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class NonCanonicalError(ValueError):
    """Bytes that are not the canonical JSON of a value; ``problem`` names the rule they break."""

    def __init__(self, problem: FormProblem, detail: str) -> None:
        super().__init__(detail)
        self.problem: FormProblem = problem
        self.detail = detail


def parse_canonical(data: bytes) -> Any:
    """The value whose canonical JSON is exactly ``data``, or ``NonCanonicalError``.

    One parser reads every ledger byte, and only the one canonical spelling of a value is
    accepted, so no two readers can see different values in the same signed bytes.
    """
    try:
        value = from_json(data, allow_inf_nan=False)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise NonCanonicalError("too-deep", _too_deep()) from None
        raise NonCanonicalError("not-json", f"is not JSON: {exc}") from None
    if _may_nest_too_deep(data) and nesting_depth(value) > MAX_NESTING:
        raise NonCanonicalError("too-deep", _too_deep())
    try:
        same = canonical_json(value) == data
    except (ValueError, TypeError) as exc:  # infinities, integers too long for decimal text
        raise NonCanonicalError(
            "non-canonical", f"holds a value JSON cannot carry: {exc}"
        ) from None
    if not same:
        duplicate = _duplicate_key(data)
        if duplicate is not None:
            raise NonCanonicalError(
                "duplicate-key",
                f"names the key {duplicate!r} twice in one object: two readers could take "
                f"different values from it",
            )
        raise NonCanonicalError(
            "non-canonical",
            "is JSON but not canonical (sorted keys, no spaces, one spelling per number and "
            "string, no trailing bytes)",
        )
    return value


def nesting_depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar is 0, ``[]`` and ``{}`` are 1)."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > MAX_NESTING:
            return deepest
        pending.extend((child, depth) for child in children)
    return deepest


def _may_nest_too_deep(data: bytes) -> bool:
    """False when ``data`` is too short, or opens too few brackets, to nest past the limit."""
    return len(data) > 2 * MAX_NESTING and data.count(b"[") + data.count(b"{") > MAX_NESTING


def _too_deep() -> str:
    return f"nests arrays and objects more than {MAX_NESTING} deep"


def _duplicate_key(data: bytes) -> str | None:
    """The first key named twice in one object of ``data``, if any (only on the slow path)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(data, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    return found[0] if found else None
