"""A ledger as a timeline for people: offset, sequence, producer, tag and fields per record."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ledger.run_artifacts import ArtifactCheck
from ledger.terminal import terminal_safe
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
    """Who, what and whether it verifies, above the timeline (ledger text escaped for terminals)."""
    provenance = manifest.get("provenance")
    provenance = provenance if isinstance(provenance, Mapping) else {}
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
    run, definition, created = (
        _text(manifest.get(key, "?")) for key in ("runId", "definitionId", "createdAt")
    )
    lines = [
        f"{style.paint('run', BOLD)}         {run}",
        f"{style.paint('definition', BOLD)}  {definition}",
        f"{style.paint('created', BOLD)}     {created}   {terminal_safe(origin)}",
    ]
    metadata = manifest.get("metadata")
    if isinstance(metadata, Mapping) and metadata:
        lines.append(f"{style.paint('metadata', BOLD)}    {_fields(metadata, style)}")
    if failure is not None:
        reason, detail = (terminal_safe(text) for text in failure)
        verdict = style.paint(f"DOES NOT VERIFY ({reason})", RED + ";" + BOLD)
        lines.append(f"{style.paint('status', BOLD)}      {verdict}: {detail}")
        lines.append(f"{'':12}the records below are shown as found, unverified")
    elif verification is not None:
        lines.append(f"{style.paint('status', BOLD)}      {_status(verification, records, style)}")
        if verification.stop is not None:
            lines.append(f"{'':12}{terminal_safe(_stop_text(verification.stop))}")
        if verification.unsigned_records:
            lines.append(f"{'':12}{_unsigned_text(verification, style)}")
        if verification.undecoded:
            tags = terminal_safe(", ".join(sorted(verification.undecoded)))
            lines.append(f"{'':12}not decoded (no catalog for them): {tags}")
    return lines


_SIGNATURES = {
    "pinned": "signature pinned (proves origin)",
    "self": "signature self (proves integrity, not origin)",
    "unsigned": "UNSIGNED (no signature covers any record)",
}


def artifact_lines(check: ArtifactCheck, style: TimelineStyle) -> list[str]:
    """A run directory's harvested files, re-hashed against its ledger, below the status line."""
    label = style.paint("artifacts", BOLD)
    if check.valid:
        files = f"{check.checked} harvested file{'s' * (check.checked != 1)}"
        return [f"{label}   {files} re-hashed: each matches the ledger"]
    first = check.problems[0]
    verdict = style.paint(f"DO NOT MATCH ({first.reason})", RED + ";" + BOLD)
    count = f"{len(check.problems)} problem{'s' * (len(check.problems) != 1)}"
    lines = [f"{label}   {verdict}: the ledger verifies, the run's files do not ({count})"]
    lines += [f"{'':12}{terminal_safe(problem.detail)}" for problem in check.problems]
    return lines


def _status(verification: Verification, records: int, style: TimelineStyle) -> str:
    signature = _SIGNATURES[verification.signature]
    if verification.completion is not None:
        state = style.paint("verified, complete", GREEN)
    else:
        state = style.paint("verified prefix, INCOMPLETE", YELLOW)
    return f"{state} · {records:,} records · {signature}"


def _stop_text(stop: LedgerStop) -> str:
    return f"stops: {stop.reason} after {stop.record_count:,} records: {stop.detail}"


def _unsigned_text(verification: Verification, style: TimelineStyle) -> str:
    signed, unsigned = verification.signed_records, verification.unsigned_records
    covered = (
        f"the last signed checkpoint covers records #0-#{signed - 1}"
        if signed
        else "no signature covers any record"
    )
    warning = style.paint(f"{unsigned:,} records after it are UNSIGNED", YELLOW)
    return f"{covered}; {warning}: anyone could have appended them"


def record_lines(records: Iterable[Mapping[str, Any]], style: TimelineStyle) -> Iterable[str]:
    """One line per record envelope (wire form, camelCase)."""
    rows = list(records)
    producer_width = min(max((len(_text(r.get("producer", ""))) for r in rows), default=6), 18)
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
    offset = elapsed_text(row.get("elapsedNanos"))
    sequence = f"#{_text(row.get('logicalSequence', '?'))}"
    producer = _text(row.get("producer", "?"))
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
    return terminal_safe(tag) if isinstance(tag, str) else "?"


def _text(value: object) -> str:
    return terminal_safe(str(value))


def elapsed_text(nanos: object) -> str:
    """``elapsedNanos`` as an offset from the run's start: ``+1.234s``, ``+2m03.456s``."""
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
    return terminal_safe(" ".join(parts))


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
