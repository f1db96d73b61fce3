"""Offline verification of a ledger directory: every check, each failing with a stable reason."""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ledger.canonical import NonCanonicalError, parse_canonical
from ledger.chain import FORM_REASONS, UTC_TIME, RecordChain, first_error
from ledger.errors import LedgerError, LedgerVerificationError
from ledger.events import Event, EventCatalog, validate_tag
from ledger.format import (
    COMPLETION,
    LEDGER_FORMAT_VERSION,
    MANIFEST,
    RECORDS,
    Completion,
    Manifest,
    RecordEnvelope,
)
from ledger.reasons import VERIFICATION_REASONS
from ledger.receipts import ReceiptClaim, check_receipt
from ledger.records import ledger_catalog
from ledger.signing import canonical_public_key, decode_ledger_key

__all__ = ["VERIFICATION_REASONS", "LedgerStop", "SignatureMode", "Verification", "verify_ledger"]

SignatureMode = Literal["pinned", "self", "unsigned"]
"""Whose signature covers the signed records: the trusted key you pinned, the key the manifest
names, or nobody's (an incomplete ledger with no verified checkpoint)."""

SignedBy = Literal["completion", "checkpoint"]


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
    signed_records: int
    """Records ``0 .. signed_records - 1`` (and the manifest) are covered by a verified signature;
    the records after them verified only as a chain that anyone could have extended."""
    signed_by: SignedBy | None
    """The signature that covers them: completion.json's, or the last checkpoint's."""
    last_checkpoint: int | None
    """``recordCount`` of the last signed checkpoint: the records a signature covers so far."""
    stop: LedgerStop | None
    undecoded: Mapping[str, int]
    """Tags the reader's catalog lacks, with record counts (only with ``require_catalog=False``)."""

    @property
    def unsigned_records(self) -> int:
        """Records after the last signature: only their chain was checked, not who wrote them."""
        return len(self.envelopes) - self.signed_records


def verify_ledger(
    catalog: EventCatalog | None,
    ledger_dir: Path | str,
    *,
    expected_definition_id: str | None = None,
    trusted_key: str | None = None,
    strict_catalog: bool = False,
    require_catalog: bool = True,
    allow_incomplete: bool = False,
    receipt: ReceiptClaim | None = None,
) -> Verification:
    """Check everything a ledger directory claims; raise ``LedgerVerificationError`` on the first
    failure. ``require_catalog=False`` keeps events of tags the catalog lacks undecoded instead of
    refusing the ledger (their envelopes, digests and chain are still checked). With ``receipt``
    (what the run that wrote it returned), the verified ledger must match its run id, record
    count, head digest, public key and completeness last (``receipt-mismatch``)."""
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
    pinned = canonical_public_key(trusted_key) if trusted_key is not None else None
    if pinned is not None and pinned != manifest.public_key:
        raise LedgerVerificationError(
            f"{directory / MANIFEST} names public key {manifest.public_key}, not the trusted "
            f"key {pinned}; this ledger was not signed by the key you pinned",
            reason="key-not-trusted",
        )
    completion = _parse_completion(directory, manifest, allow_incomplete=allow_incomplete)
    data = _read(directory / RECORDS, "records-missing", "the ledger directory")
    chain = RecordChain(manifest, manifest_bytes, reader)
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
    signed_by: SignedBy | None = None
    signed_records = 0
    if completion is not None:
        _check_completion(completion, chain, data, directory)
        signed_by, signed_records = "completion", chain.count
    elif chain.last_checkpoint:
        # A checkpoint signs the records before it, not its own line: a crash, or anyone who
        # deleted completion.json, may have left unsigned lines after it. One on line 0 signs
        # no record at all, so it leaves the ledger unsigned.
        signed_by, signed_records = "checkpoint", chain.last_checkpoint
    signature: SignatureMode = "unsigned"
    if signed_by is not None:
        signature = "pinned" if pinned is not None else "self"
    if receipt is not None:
        check_receipt(
            receipt,
            directory=directory,
            run_id=manifest.run_id,
            public_key=manifest.public_key,
            record_count=chain.count,
            head_digest=chain.head,
            complete=completion is not None,
        )
    return Verification(
        directory=directory,
        manifest=manifest,
        completion=completion,
        envelopes=tuple(chain.envelopes),
        events=tuple(chain.events),
        signature=signature,
        signed_records=signed_records,
        signed_by=signed_by,
        last_checkpoint=chain.last_checkpoint,
        stop=stop,
        undecoded=dict(chain.undecoded),
    )


def _check_completion(
    completion: Completion, chain: RecordChain, data: bytes, directory: Path
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
    raw = _parse_file(manifest_bytes, path, "manifest-invalid")
    try:
        manifest = Manifest.model_validate(raw, strict=True)
        for tag in manifest.catalog_tags:
            validate_tag(tag, "in the manifest")
        decode_ledger_key(manifest.public_key)
    except ValidationError as exc:
        raise LedgerVerificationError(
            f"{path} breaks the manifest schema: {first_error(exc)}", reason="manifest-invalid"
        ) from None
    except LedgerError as exc:
        raise LedgerVerificationError(f"{path}: {exc.detail}", reason="manifest-invalid") from None
    tags = manifest.catalog_tags
    if any(earlier >= later for earlier, later in pairwise(tags)):
        raise LedgerVerificationError(
            f"{path} lists catalogTags out of order or twice; they are sorted and unique",
            reason="manifest-invalid",
        )
    if UTC_TIME.fullmatch(manifest.created_at) is None:
        raise LedgerVerificationError(
            f"{path} has createdAt {manifest.created_at[:40]!r}, not a UTC time written "
            f"2025-01-31T12:00:00.123456Z",
            reason="manifest-invalid",
        )
    return manifest


def _parse_file(data: bytes, path: Path, invalid: str) -> dict[str, Any]:
    """The JSON object in manifest.json or completion.json, which must be canonical and of
    format version 1 (a newer version is named as such, whatever else it breaks)."""
    try:
        raw = parse_canonical(data)
        problem = None
    except NonCanonicalError as exc:
        raw, problem = _lenient(data), exc
    version = raw.get("ledgerFormatVersion", LEDGER_FORMAT_VERSION) if isinstance(raw, dict) else 1
    if version != LEDGER_FORMAT_VERSION:
        raise LedgerVerificationError(
            f"{path} has ledgerFormatVersion {str(version)[:20]}; this "
            f"reader understands {LEDGER_FORMAT_VERSION}; use a matching society-runner version",
            reason="format-unsupported",
        )
    if problem is not None:
        reason = FORM_REASONS.get(problem.problem, invalid)
        raise LedgerVerificationError(f"{path} {problem.detail}", reason=reason)
    if not isinstance(raw, dict):
        raise LedgerVerificationError(
            f"{path} holds a JSON {type(raw).__name__}, not an object", reason=invalid
        )
    return raw


def _lenient(data: bytes) -> Any:
    """Whatever plain JSON parsing makes of bytes that are not canonical (None if it fails)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


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
    wire = _parse_file(raw, path, "completion-invalid")
    try:
        completion = Completion.model_validate(wire, strict=True)
    except ValidationError as exc:
        raise LedgerVerificationError(
            f"{path} breaks the completion schema: {first_error(exc)}", reason="completion-invalid"
        ) from None
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
