"""The walk over records.ndjson: every rule a record line keeps, in the order they are checked."""

from __future__ import annotations

import hashlib
import re
from collections import Counter

from pydantic import ValidationError

from ledger.canonical import NonCanonicalError, parse_canonical, sha256_hex
from ledger.errors import CatalogError, LedgerVerificationError
from ledger.events import Event, EventCatalog
from ledger.format import LedgerCheckpoint, Manifest, RecordEnvelope
from ledger.signing import decode_ledger_key, signature_checker

UTC_TIME = re.compile(
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"\.[0-9]{6}Z"
)
"""``observedAt`` and ``createdAt``: UTC, microseconds, a ``Z`` (what ``utc_now`` writes)."""

FORM_REASONS = {
    "duplicate-key": "duplicate-key",
    "non-canonical": "non-canonical-json",
}
"""The verification reason for each canonical-form problem; the rest make a file invalid."""


class RecordChain:
    """Walks records.ndjson: form, envelope, run id, sequence, event id, time, chain, event,
    checkpoints. ``count`` and ``head`` describe the lines verified so far."""

    def __init__(
        self,
        manifest: Manifest,
        manifest_bytes: bytes,
        catalog: EventCatalog,
    ) -> None:
        self.manifest = manifest
        self.manifest_sha = sha256_hex(manifest_bytes)
        self.catalog = catalog
        self.check_signature = signature_checker(decode_ledger_key(manifest.public_key))
        self.count = 0
        self.head = self.manifest_sha
        self.envelopes: list[RecordEnvelope] = []
        self.events: list[Event | None] = []
        self.last_checkpoint: int | None = None
        self.undecoded: Counter[str] = Counter()

    def walk(self, data: bytes) -> int:
        """Verify every newline-terminated line; return the offset where they end."""
        run_id = self.manifest.run_id
        id_prefix = f"{run_id}:"
        declared = frozenset(self.manifest.catalog_tags)
        classes = dict(self.catalog.items())
        validate = RecordEnvelope.__pydantic_validator__.validate_python
        observed_at = UTC_TIME.fullmatch
        sha256 = hashlib.sha256
        envelopes, events = self.envelopes, self.events
        index, head, position, elapsed = 0, self.head, 0, 0
        try:
            while (newline := data.find(b"\n", position)) >= 0:
                line = data[position:newline]
                try:
                    wire = parse_canonical(line)
                    envelope: RecordEnvelope = validate(wire, strict=True)
                except NonCanonicalError as exc:
                    reason = FORM_REASONS.get(exc.problem, "record-invalid")
                    raise _fail(reason, index, exc.detail) from None
                except ValidationError as exc:
                    detail = f"breaks the envelope: {first_error(exc)}"
                    raise _fail("record-invalid", index, detail) from None
                if envelope.run_id != run_id:
                    raise _fail(
                        "run-id-mismatch", index, f"has run id {envelope.run_id!r}, not {run_id!r}"
                    )
                if envelope.logical_sequence != index:
                    raise _fail(
                        "sequence-gap",
                        index,
                        f"has logicalSequence {envelope.logical_sequence}: records were deleted, "
                        f"duplicated or moved",
                    )
                if envelope.event_id != f"{id_prefix}{index}":
                    _refuse_event_id(envelope.event_id, id_prefix, index)
                if envelope.elapsed_nanos < elapsed:
                    raise _fail(
                        "elapsed-decreasing",
                        index,
                        f"has elapsedNanos {envelope.elapsed_nanos}, below {elapsed} before it: "
                        f"the writer's clock never runs backwards",
                    )
                elapsed = envelope.elapsed_nanos
                if observed_at(envelope.observed_at) is None:
                    raise _fail(
                        "observed-at-invalid",
                        index,
                        f"has observedAt {envelope.observed_at[:40]!r}, not a UTC time written "
                        f"2025-01-31T12:00:00.123456Z",
                    )
                if envelope.prev_digest != head:
                    if index == 0:
                        raise _fail(
                            "manifest-digest-mismatch",
                            0,
                            "does not chain to manifest.json: the manifest was changed",
                        )
                    raise _fail(
                        "chain-broken",
                        index,
                        f"(line {index + 1} of records.ndjson) has prevDigest "
                        f"{envelope.prev_digest[:16]!r}…, but record {index - 1} (line {index}) "
                        f"hashes to {head[:16]}…: a record before it was changed",
                    )
                tag = envelope.event.get("tag")
                if not isinstance(tag, str) or tag not in declared:
                    raise _fail(
                        "undeclared-tag",
                        index,
                        f"has tag {str(tag)[:80]!r}, not declared in the manifest",
                    )
                event: Event | None = None
                if tag in classes:
                    try:
                        event = self.catalog.decode(envelope.event, strict=True)
                    except CatalogError as exc:
                        raise _fail("event-invalid", index, exc.detail) from None
                    if type(event) is LedgerCheckpoint:
                        self._check_checkpoint(event, envelope.producer, index, head)
                else:
                    self.undecoded[tag] += 1
                envelopes.append(envelope)
                events.append(event)
                head = sha256(line).hexdigest()
                index += 1
                position = newline + 1
        finally:
            self.count, self.head = index, head
        return position

    def _check_checkpoint(
        self, checkpoint: LedgerCheckpoint, producer: str, index: int, head: str
    ) -> None:
        if producer != "ledger":
            raise _fail(
                "checkpoint-producer-invalid",
                index,
                f"is a checkpoint from producer {producer[:80]!r}; only the ledger writes "
                f"checkpoints (producer 'ledger')",
            )
        if checkpoint.record_count != index or checkpoint.head_digest != head:
            raise _fail(
                "checkpoint-mismatch",
                index,
                f"claims {checkpoint.record_count} records ending in "
                f"{checkpoint.head_digest[:16]!r}…, but {index} records end in {head[:16]}…",
            )
        signed = LedgerCheckpoint.signed_bytes(self.manifest.run_id, index, head)
        if not self.check_signature(checkpoint.signature, signed):
            raise _fail(
                "checkpoint-signature-invalid",
                index,
                f"carries a signature that does not verify with {self.manifest.public_key}",
            )
        self.last_checkpoint = index


def _refuse_event_id(event_id: str, prefix: str, index: int) -> None:
    number = event_id[len(prefix) :] if event_id.startswith(prefix) else ""
    if (
        0 < len(number) <= 20
        and number.isascii()
        and number.isdigit()
        and str(int(number)) == number
    ):
        if int(number) < index:
            raise _fail(
                "duplicate-event-id",
                index,
                f"repeats {event_id[:100]!r}, the eventId of record {int(number)}",
            )
    raise _fail(
        "event-id-invalid",
        index,
        f"has eventId {event_id[:100]!r}, not {prefix}{index} (<runId>:<logicalSequence>)",
    )


def _fail(reason: str, index: int, what: str) -> LedgerVerificationError:
    return LedgerVerificationError(f"record {index} {what}", reason=reason, record=index)


def first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in error["loc"]) or "(top level)"
    return f"{location}: {error['msg']}"
