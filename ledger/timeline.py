"""A ledger as a timeline for people: offset, sequence, producer, tag and fields per record."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ledger.verification import LedgerStop, Verification

_DIGEST = re.compile(r"^[0-9a-f]{40,}$")
_BASE64 = re.compile(r"^(ed25519:)?[A-Za-z0-9+/]{40,}={0,2}$")


@dataclass(frozen=True, slots=True)
class TimelineStyle:
    """How to draw: ANSI colours or not, and the line width to fit (None: never cut lines)."""

    color: bool = False
    width: int | None = None
    value_width: int = 48

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text


DIM, BOLD, CYAN, YELLOW, RED, GREEN = "2", "1", "36", "33", "31", "32"


def header_lines(
    manifest: Mapping[str, Any],
    *,
    records: int,
    style: TimelineStyle,
    verification: Verification | None = None,
    failure: tuple[str, str] | None = None,
) -> list[str]:
    """Who, what and whether it verifies, above the timeline."""
    provenance = manifest.get("provenance") or {}
    commit = provenance.get("gitCommit")
    origin = " · ".join(
        part
        for part in (
            f"society-runner {provenance.get('packageVersion', '?')}",
            f"git {commit[:10]}" if isinstance(commit, str) else "",
            f"python {provenance.get('pythonVersion', '?')}",
            f"profile {provenance.get('profile', '?')}",
        )
        if part
    )
    lines = [
        f"{style.paint('run', BOLD)}         {manifest.get('runId', '?')}",
        f"{style.paint('definition', BOLD)}  {manifest.get('definitionId', '?')}",
        f"{style.paint('created', BOLD)}     {manifest.get('createdAt', '?')}   {origin}",
    ]
    metadata = manifest.get("metadata")
    if isinstance(metadata, Mapping) and metadata:
        lines.append(f"{style.paint('metadata', BOLD)}    {_fields(metadata, style)}")
    if failure is not None:
        reason, detail = failure
        verdict = style.paint(f"DOES NOT VERIFY ({reason})", RED + ";" + BOLD)
        lines.append(f"{style.paint('status', BOLD)}      {verdict}: {detail}")
        lines.append(f"{'':12}the records below are shown as found, unverified")
    elif verification is not None:
        lines.append(f"{style.paint('status', BOLD)}      {_status(verification, records, style)}")
        if verification.stop is not None:
            lines.append(f"{'':12}{_stop_text(verification.stop, verification.last_checkpoint)}")
        if verification.undecoded:
            tags = ", ".join(sorted(verification.undecoded))
            lines.append(f"{'':12}not decoded (no catalog for them): {tags}")
    return lines


def _status(verification: Verification, records: int, style: TimelineStyle) -> str:
    signature = (
        "signature pinned (proves origin)"
        if verification.signature == "pinned"
        else "signature self (proves integrity, not origin)"
    )
    if verification.completion is not None:
        state = style.paint("verified, complete", GREEN)
    else:
        state = style.paint("verified prefix, INCOMPLETE", YELLOW)
    return f"{state} · {records:,} records · {signature}"


def _stop_text(stop: LedgerStop, last_checkpoint: int | None) -> str:
    signed = (
        f"the last signed checkpoint covers {last_checkpoint:,} records"
        if last_checkpoint is not None
        else "no signed checkpoint: nothing in it is signed"
    )
    return f"stops: {stop.reason} after {stop.record_count:,} records: {stop.detail}; {signed}"


def record_lines(records: Iterable[Mapping[str, Any]], style: TimelineStyle) -> Iterable[str]:
    """One line per record envelope (wire form, camelCase)."""
    rows = list(records)
    producer_width = min(max((len(str(r.get("producer", ""))) for r in rows), default=6), 18)
    tag_width = min(max((len(_tag(r)) for r in rows), default=10), 40)
    sequence_width = max(len(str(len(rows))), 3)
    for row in rows:
        yield record_line(
            row,
            style,
            producer_width=producer_width,
            tag_width=tag_width,
            sequence_width=sequence_width,
        )


def record_line(
    row: Mapping[str, Any],
    style: TimelineStyle,
    *,
    producer_width: int = 12,
    tag_width: int = 32,
    sequence_width: int = 5,
) -> str:
    """``  +1.234s   #42  alice   acme.offer-made/v1   price=12 note="firm"``"""
    tag = _tag(row)
    event = row.get("event")
    body = {k: v for k, v in event.items() if k != "tag"} if isinstance(event, Mapping) else {}
    offset = _offset(row.get("elapsedNanos"))
    sequence = f"#{row.get('logicalSequence', '?')}"
    producer = str(row.get("producer", "?"))
    prefix_plain = (
        f"{offset:>11}  {sequence:>{sequence_width + 1}}  {producer:<{producer_width}}  "
        f"{tag:<{tag_width}}  "
    )
    fields = _fields(body, style, row)
    if style.width is not None:
        room = max(style.width - len(prefix_plain), 16)
        fields = _cut(fields, room)
    tag_color = YELLOW if tag.startswith("ledger.") else CYAN
    when = style.paint(f"{offset:>11}", DIM)
    number = style.paint(f"{sequence:>{sequence_width + 1}}", DIM)
    kind = style.paint(f"{tag:<{tag_width}}", tag_color)
    return f"{when}  {number}  {producer:<{producer_width}}  {kind}  {fields}".rstrip()


def tag_counts_line(counts: Mapping[str, int]) -> str:
    return "by tag: " + " · ".join(f"{tag} {count:,}" for tag, count in sorted(counts.items()))


def _tag(row: Mapping[str, Any]) -> str:
    event = row.get("event")
    tag = event.get("tag") if isinstance(event, Mapping) else None
    return tag if isinstance(tag, str) else "?"


def _offset(nanos: object) -> str:
    if not isinstance(nanos, int):
        return "?"
    seconds = nanos / 1e9
    if seconds < 60:
        return f"+{seconds:.3f}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"+{int(minutes)}m{seconds:06.3f}s"
    hours, minutes = divmod(minutes, 60)
    return f"+{int(hours)}h{int(minutes):02d}m{seconds:04.1f}s"


def _fields(
    body: Mapping[str, Any], style: TimelineStyle, row: Mapping[str, Any] | None = None
) -> str:
    parts = [f"{key}={_value(value, style.value_width)}" for key, value in body.items()]
    if row is not None:
        for key in ("causationId", "correlationId"):
            if isinstance(row.get(key), str):
                parts.append(f"{key}={_value(row[key], 24)}")
    return " ".join(parts)


def _value(value: Any, width: int) -> str:
    if isinstance(value, str):
        if _DIGEST.match(value) or _BASE64.match(value):
            return value[: value.find(":") + 9] + "…" if ":" in value else value[:8] + "…"
        return _cut(json.dumps(value, ensure_ascii=False), width, closing='"')
    if isinstance(value, list) and len(value) > 8:
        return f"[{len(value)} items]"
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
    closing = {"[": "]", "{": "}"}.get(text[:1], "")
    return _cut(text, width, closing=closing)


def _cut(text: str, width: int, closing: str = "") -> str:
    if len(text) <= width:
        return text
    return text[: max(width - 1 - len(closing), 1)] + "…" + closing
