"""Offline verification of a ledger directory: every check, each failing with a stable reason."""

from __future__ import annotations

import gc
import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from ledger.errors import CatalogError, LedgerError, LedgerVerificationError
from ledger.events import Event, EventCatalog, validate_tag
from ledger.format import (
    COMPLETION,
    LEDGER_FORMAT_VERSION,
    MANIFEST,
    RECORDS,
    Completion,
    LedgerCheckpoint,
    Manifest,
    RecordEnvelope,
)
from ledger.records import ledger_catalog
from ledger.signing import canonical_public_key, decode_public_key, signature_checker

VERIFICATION_REASONS: Mapping[str, str] = {
    "manifest-missing": "manifest.json does not exist or cannot be read",
    "manifest-invalid": "manifest.json is not JSON or breaks its schema (unknown fields too)",
    "format-unsupported": "a ledgerFormatVersion this reader does not understand",
    "definition-mismatch": "the manifest's definitionId is not the expected one",
    "catalog-mismatch": "the reader's catalog lacks a tag the manifest declares "
    "(or, with strict_catalog, is not exactly the manifest's)",
    "key-not-trusted": "the manifest names a public key other than the pinned trusted key",
    "records-missing": "records.ndjson does not exist or cannot be read",
    "incomplete": "completion.json is missing: the writer never finished (crash or still running)",
    "completion-invalid": "completion.json is not JSON or breaks its schema",
    "run-id-mismatch": "a record or completion.json carries a run id other than the manifest's",
    "record-invalid": "a record line is not JSON or breaks the envelope schema",
    "sequence-gap": "a record's logicalSequence is not its position: a record was deleted, "
    "duplicated or moved",
    "duplicate-event-id": "two records share an eventId",
    "manifest-digest-mismatch": "record 0's prevDigest or completion's manifestSha256 is not the "
    "SHA-256 of manifest.json",
    "chain-broken": "a record's prevDigest is not the SHA-256 of the line before it",
    "undeclared-tag": "a record's event tag is not in the manifest's catalogTags",
    "event-invalid": "an event does not validate against its class",
    "checkpoint-mismatch": "a checkpoint's recordCount or headDigest does not describe the "
    "records before it",
    "checkpoint-signature-invalid": "a checkpoint's signature does not verify",
    "torn-tail": "the last line of records.ndjson is cut off (no trailing newline)",
    "record-count-mismatch": "completion's recordCount is not the number of records",
    "head-digest-mismatch": "completion's headDigest is not the SHA-256 of the last record line",
    "records-digest-mismatch": "completion's recordsSha256 is not the SHA-256 of records.ndjson",
    "signature-invalid": "completion.json's signature does not verify",
}
"""Every reason ``LedgerVerificationError`` can carry, with what it means (the README's table)."""

SignatureMode = Literal["pinned", "self"]


@dataclass(frozen=True, slots=True)
class LedgerStop:
    """Where the verified prefix of an incomplete ledger ends, and why."""

    reason: Literal["torn-tail", "no-completion"]
    record_count: int
    """Records that verified, all before the stop."""
    byte_offset: int
    """Bytes of records.ndjson that verified; a torn tail starts here."""
    detail: str


@dataclass(frozen=True, slots=True)
class Verification:
    """What a verified ledger holds; ``events[i]`` is None where the catalog lacks its tag."""

    directory: Path
    manifest: Manifest
    completion: Completion | None
    envelopes: tuple[RecordEnvelope, ...]
    events: tuple[Event | None, ...]
    signature: SignatureMode
    last_checkpoint: int | None
    """``recordCount`` of the last signed checkpoint: the records a signature covers so far."""
    stop: LedgerStop | None
    undecoded: Mapping[str, int]
    """Tags the reader's catalog lacks, with record counts (only with ``require_catalog=False``)."""


def verify_ledger(
    catalog: EventCatalog | None,
    ledger_dir: Path | str,
    *,
    expected_definition_id: str | None = None,
    trusted_key: str | None = None,
    strict_catalog: bool = False,
    require_catalog: bool = True,
    allow_incomplete: bool = False,
) -> Verification:
    """Check everything a ledger directory claims; raise ``LedgerVerificationError`` on the first
    failure. ``require_catalog=False`` keeps events of tags the catalog lacks undecoded instead of
    refusing the ledger (their envelopes, digests and chain are still checked)."""
    directory = Path(ledger_dir)
    reader = EventCatalog.merge(ledger_catalog, *([catalog] if catalog is not None else []))
    manifest_bytes = _read(directory / MANIFEST, "manifest-missing", "the ledger directory")
    manifest = _parse_manifest(manifest_bytes, directory)
    if expected_definition_id is not None and manifest.definition_id != expected_definition_id:
        raise LedgerVerificationError(
            f"{directory} holds definition {manifest.definition_id!r}, expected "
            f"{expected_definition_id!r}; open the ledger of the experiment you meant",
            reason="definition-mismatch",
        )
    _check_catalog(manifest, reader, strict=strict_catalog, required=require_catalog)
    signature: SignatureMode = "self"
    if trusted_key is not None:
        if canonical_public_key(trusted_key) != canonical_public_key(manifest.public_key):
            raise LedgerVerificationError(
                f"{directory / MANIFEST} names public key {manifest.public_key}, not the trusted "
                f"key {trusted_key}; this ledger was not signed by the key you pinned",
                reason="key-not-trusted",
            )
        signature = "pinned"
    completion = _parse_completion(directory, manifest, allow_incomplete=allow_incomplete)
    data = _read(directory / RECORDS, "records-missing", "the ledger directory")
    chain = _RecordChain(manifest, manifest_bytes, reader, require_catalog=require_catalog)
    with _cyclic_gc_paused():
        end = chain.walk(data)
    stop: LedgerStop | None = None
    if end < len(data):
        torn = (
            f"records.ndjson ends in {len(data) - end} bytes without a newline after record "
            f"{chain.count - 1} (byte {end}): the last append was cut off"
        )
        if completion is not None or not allow_incomplete:
            raise LedgerVerificationError(
                f"{torn}; a complete ledger never has a torn line", reason="torn-tail"
            )
        stop = LedgerStop("torn-tail", chain.count, end, torn)
    elif completion is None:
        stop = LedgerStop(
            "no-completion",
            chain.count,
            end,
            f"records.ndjson ends cleanly after record {chain.count - 1} but completion.json "
            f"is missing: the writer stopped before completing",
        )
    if completion is not None:
        _check_completion(completion, chain, data, manifest_bytes, directory)
    return Verification(
        directory=directory,
        manifest=manifest,
        completion=completion,
        envelopes=tuple(chain.envelopes),
        events=tuple(chain.events),
        signature=signature,
        last_checkpoint=chain.last_checkpoint,
        stop=stop,
        undecoded=dict(chain.undecoded),
    )


class _RecordChain:
    """Walks records.ndjson: envelope, run id, sequence, event ids, chain, event, checkpoints."""

    def __init__(
        self,
        manifest: Manifest,
        manifest_bytes: bytes,
        catalog: EventCatalog,
        *,
        require_catalog: bool,
    ) -> None:
        self.manifest = manifest
        self.manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()
        self.catalog = catalog
        self.require_catalog = require_catalog
        self.check_signature = signature_checker(decode_public_key(manifest.public_key))
        self.count = 0
        self.head = self.manifest_sha
        self.envelopes: list[RecordEnvelope] = []
        self.events: list[Event | None] = []
        self.last_checkpoint: int | None = None
        self.undecoded: Counter[str] = Counter()

    def walk(self, data: bytes) -> int:
        """Verify every newline-terminated line; return the offset where they end."""
        run_id = self.manifest.run_id
        declared = frozenset(self.manifest.catalog_tags)
        classes = dict(self.catalog.items())
        seen_ids: set[str] = set()
        validate = RecordEnvelope.model_validate_json
        sha256 = hashlib.sha256
        envelopes, events = self.envelopes, self.events
        index, head, position = 0, self.head, 0
        try:
            while (newline := data.find(b"\n", position)) >= 0:
                line = data[position:newline]
                try:
                    envelope = validate(line, strict=True)
                except ValidationError as exc:
                    raise _fail(
                        "record-invalid", index, f"breaks the envelope: {_first(exc)}"
                    ) from None
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
                if envelope.event_id in seen_ids:
                    raise _fail("duplicate-event-id", index, f"repeats {envelope.event_id!r}")
                seen_ids.add(envelope.event_id)
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
                        f"has prevDigest {envelope.prev_digest[:16]}…, but line {index - 1} "
                        f"hashes to {head[:16]}…: a record before it was changed",
                    )
                tag = envelope.event.get("tag")
                if not isinstance(tag, str) or tag not in declared:
                    raise _fail(
                        "undeclared-tag", index, f"has tag {tag!r}, not declared in the manifest"
                    )
                event: Event | None = None
                if tag in classes:
                    try:
                        event = self.catalog.decode(envelope.event)
                    except CatalogError as exc:
                        raise _fail("event-invalid", index, exc.detail) from None
                    if type(event) is LedgerCheckpoint:
                        self._check_checkpoint(event, index, head)
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

    def _check_checkpoint(self, checkpoint: LedgerCheckpoint, index: int, head: str) -> None:
        if checkpoint.record_count != index or checkpoint.head_digest != head:
            raise _fail(
                "checkpoint-mismatch",
                index,
                f"claims {checkpoint.record_count} records ending in "
                f"{checkpoint.head_digest[:16]}…, but {index} records end in {head[:16]}…",
            )
        signed = LedgerCheckpoint.signed_bytes(self.manifest.run_id, index, head)
        if not self.check_signature(checkpoint.signature, signed):
            raise _fail(
                "checkpoint-signature-invalid",
                index,
                f"carries a signature that does not verify with {self.manifest.public_key}",
            )
        self.last_checkpoint = index


def _check_completion(
    completion: Completion,
    chain: _RecordChain,
    data: bytes,
    manifest_bytes: bytes,
    directory: Path,
) -> None:
    path = directory / COMPLETION
    if completion.record_count != chain.count:
        raise LedgerVerificationError(
            f"{path} counts {completion.record_count} records, records.ndjson holds "
            f"{chain.count}: records were removed or added after completion",
            reason="record-count-mismatch",
        )
    if completion.head_digest != chain.head:
        raise LedgerVerificationError(
            f"{path} names head digest {completion.head_digest[:16]}…, the last record hashes "
            f"to {chain.head[:16]}…: the last record was changed",
            reason="head-digest-mismatch",
            record=chain.count - 1,
        )
    if completion.records_sha256 != hashlib.sha256(data).hexdigest():
        raise LedgerVerificationError(
            f"{path} names a recordsSha256 that is not the SHA-256 of records.ndjson",
            reason="records-digest-mismatch",
        )
    if completion.manifest_sha256 != chain.manifest_sha:
        raise LedgerVerificationError(
            f"{path} names a manifestSha256 that is not the SHA-256 of manifest.json",
            reason="manifest-digest-mismatch",
        )
    if not chain.check_signature(completion.signature, completion.signed_bytes()):
        raise LedgerVerificationError(
            f"{path} carries a signature that does not verify with "
            f"{chain.manifest.public_key}: the completion was changed or signed by another key",
            reason="signature-invalid",
        )


def _read(path: Path, reason: str, where: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise LedgerVerificationError(
            f"cannot read {path}: {exc.strerror or exc}; is {path.parent} {where}?", reason=reason
        ) from None


def _parse_manifest(manifest_bytes: bytes, directory: Path) -> Manifest:
    path = directory / MANIFEST
    try:
        raw = json.loads(manifest_bytes)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LedgerVerificationError(
            f"{path} is not JSON: {exc}", reason="manifest-invalid"
        ) from None
    if isinstance(raw, dict) and raw.get("ledgerFormatVersion") != LEDGER_FORMAT_VERSION:
        raise LedgerVerificationError(
            f"{path} has ledgerFormatVersion {raw.get('ledgerFormatVersion')!r}; this reader "
            f"understands {LEDGER_FORMAT_VERSION}; use a matching society-runner version",
            reason="format-unsupported",
        )
    try:
        manifest = Manifest.model_validate(raw, strict=True)
        for tag in manifest.catalog_tags:
            validate_tag(tag, "in the manifest")
        decode_public_key(manifest.public_key)
    except ValidationError as exc:
        raise LedgerVerificationError(
            f"{path} breaks the manifest schema: {_first(exc)}", reason="manifest-invalid"
        ) from None
    except LedgerError as exc:
        raise LedgerVerificationError(f"{path}: {exc.detail}", reason="manifest-invalid") from None
    if len(set(manifest.catalog_tags)) != len(manifest.catalog_tags):
        raise LedgerVerificationError(
            f"{path} declares a catalog tag twice", reason="manifest-invalid"
        )
    return manifest


def _check_catalog(
    manifest: Manifest, reader: EventCatalog, *, strict: bool, required: bool
) -> None:
    declared = set(manifest.catalog_tags)
    held = set(reader.tags)
    missing = sorted(declared - held)
    if missing and required:
        raise LedgerVerificationError(
            f"the ledger declares tags your catalog does not hold: {', '.join(missing)}; pass a "
            f"catalog with their event classes (a reader may hold more classes, never fewer)",
            reason="catalog-mismatch",
        )
    extra = sorted(held - declared)
    if strict and extra:
        raise LedgerVerificationError(
            f"strict catalog check: your catalog holds tags the ledger does not declare: "
            f"{', '.join(extra)}",
            reason="catalog-mismatch",
        )


def _parse_completion(
    directory: Path, manifest: Manifest, *, allow_incomplete: bool
) -> Completion | None:
    path = directory / COMPLETION
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if allow_incomplete:
            return None
        raise LedgerVerificationError(
            f"{path} is missing: the writer never completed this ledger (it crashed or is still "
            f"running); open it as an incomplete view to check the prefix it left",
            reason="incomplete",
        ) from None
    except OSError as exc:
        raise LedgerVerificationError(
            f"cannot read {path}: {exc.strerror or exc}", reason="completion-invalid"
        ) from None
    try:
        completion = Completion.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        raise LedgerVerificationError(
            f"{path} breaks the completion schema: {_first(exc)}", reason="completion-invalid"
        ) from None
    if completion.ledger_format_version != LEDGER_FORMAT_VERSION:
        raise LedgerVerificationError(
            f"{path} has ledgerFormatVersion {completion.ledger_format_version}; this reader "
            f"understands {LEDGER_FORMAT_VERSION}",
            reason="format-unsupported",
        )
    if completion.run_id != manifest.run_id:
        raise LedgerVerificationError(
            f"{path} belongs to run {completion.run_id!r}, the manifest to {manifest.run_id!r}",
            reason="run-id-mismatch",
        )
    return completion


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The walk allocates many small acyclic objects that stay alive; the collector would rescan
    them over and over (about a quarter of the time) and can free none of them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _fail(reason: str, index: int, what: str) -> LedgerVerificationError:
    return LedgerVerificationError(f"record {index} {what}", reason=reason, record=index)


def _first(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in error["loc"]) or "(top level)"
    return f"{location}: {error['msg']}"
