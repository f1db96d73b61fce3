"""The durable ledger writer: exclusive create, group commit, signed checkpoints, live followers."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ledger.canonical import MAX_NESTING, canonical_json, nesting_depth, sha256_hex
from ledger.errors import LedgerEncodingError, LedgerError, LedgerWriteError
from ledger.events import Event, EventCatalog
from ledger.format import (
    CHECKPOINT_EVERY_RECORDS,
    CHECKPOINT_EVERY_SECONDS,
    COMPLETION,
    LEDGER_FORMAT_VERSION,
    MANIFEST,
    RECORDS,
    Completion,
    LedgerCheckpoint,
    Manifest,
    Provenance,
    utc_now,
)
from ledger.records import LedgerReceipt, Record, ledger_catalog, parse_record_lines
from ledger.signing import SigningKey
from ledger.storage import DurableFiles

E = TypeVar("E", bound=Event)

_Entry = tuple[Event, str, str | None, str | None]  # event, producer, causation, correlation


@dataclass(slots=True, eq=False)
class _Batch:
    """Appends that commit together: one write, one fsync, one wake-up for all their callers."""

    entries: list[_Entry] = field(default_factory=list)
    results: list[Record | BaseException] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)


class LedgerWriter:
    """Appends records durably. Create it with ``open_ledger_writer``; do not construct directly."""

    def __init__(
        self,
        directory: Path,
        catalog: EventCatalog,
        manifest: Manifest,
        manifest_bytes: bytes,
        signing_key: SigningKey,
        files: DurableFiles,
        records_fd: int,
    ) -> None:
        self.directory = directory
        self.catalog = EventCatalog.merge(ledger_catalog, catalog)
        self._classes = frozenset(self.catalog)  # the hot path's membership test
        self.manifest = manifest
        self._key = signing_key
        self._files = files
        self._fd = records_fd
        self._started_ns = time.monotonic_ns()
        self._last_elapsed = 0
        self._manifest_sha = sha256_hex(manifest_bytes)
        # The encoder's position: advanced in the committer thread as it encodes a batch.
        self._head = self._manifest_sha
        self._count = 0
        self._since_checkpoint = 0
        self._checkpoint_at = time.monotonic()
        # What is durable (count, head), one tuple so no reader sees half an update; only this
        # reaches followers, receipts and record_count.
        self._durable = (0, self._manifest_sha)
        self._committed_bytes = 0
        self._records_hash = hashlib.sha256()
        self._open = _Batch()
        self._wake = anyio.Event()
        self._committed = anyio.Event()
        self._failure: LedgerWriteError | None = None
        self._completion: LedgerReceipt | None = None
        self._completion_lock = anyio.Lock()
        self._closing = False  # no new appends
        self._sealed = False  # final checkpoint written and records.ndjson closed by complete()
        self._abandoned = False  # the block was left without complete(); records.ndjson closed
        self._finished = False  # followers stop once caught up
        self._committer_done = anyio.Event()

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def public_key(self) -> str:
        return self._key.public_key

    @property
    def record_count(self) -> int:
        """Durable records so far (checkpoints included)."""
        return self._durable[0]

    @property
    def failed(self) -> LedgerWriteError | None:
        return self._failure

    async def append(
        self,
        event: Event,
        *,
        producer: str,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Record:
        """Append ``event``; returns once its bytes (and all before them) are durable."""
        if self._closing or self._failure is not None:
            self._check_open()
        if type(event) not in self._classes:
            self.catalog.encode(event)  # raises the catalog's typed error
        batch = self._open
        index = len(batch.entries)
        batch.entries.append((event, producer, causation_id, correlation_id))
        if index == 0:
            self._wake.set()
        await batch.done.wait()
        result = batch.results[index]
        if isinstance(result, Record):
            return result
        raise result

    async def complete(self) -> LedgerReceipt:
        """Flush, write the final checkpoint and the signed completion file. Idempotent."""
        async with self._completion_lock:
            if self._completion is not None:
                # Re-publishing is a no-op for the same bytes and a conflict for different ones.
                await anyio.to_thread.run_sync(self._publish_completion)
                return self._completion
            if self._failure is not None:
                raise self._failure
            if self._abandoned:
                self._check_open()
            if not self._sealed:
                self._closing = True
                self._wake.set()
                await self._committer_done.wait()
                if self._failure is not None:
                    raise self._failure
                await anyio.to_thread.run_sync(self._final_commit)
            self._completion = await anyio.to_thread.run_sync(self._publish_completion)
            self._finished = True
            self._notify()
            return self._completion

    def receipt(self) -> LedgerReceipt:
        """What the ledger proves right now: complete, or its durable prefix."""
        if self._completion is not None:
            return self._completion
        count, head = self._durable
        return LedgerReceipt(
            ledger_dir=str(self.directory),
            run_id=self.run_id,
            record_count=count,
            head_digest=head,
            public_key=self.public_key,
            complete=False,
        )

    async def records(self) -> AsyncIterator[Record]:
        """Every durable record from the first, then each new commit, until the ledger completes."""
        offset = 0
        buffered = b""
        path = self.directory / RECORDS
        while True:
            committed = self._committed_bytes
            if offset < committed:
                chunk = await anyio.to_thread.run_sync(_read_range, path, offset, committed)
                offset = committed
                lines = (buffered + chunk).split(b"\n")
                buffered = lines.pop()
                for record in parse_record_lines(self.catalog, lines):
                    yield record
                continue
            if self._finished or self._failure is not None:
                return
            await self._committed.wait()

    async def events(self, event_class: type[E]) -> AsyncIterator[E]:
        """Like ``records()`` for one event class only."""
        async for record in self.records():
            if isinstance(record.event, event_class):
                yield record.event

    # ---- internals -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._completion is not None or self._closing:
            raise LedgerError(
                f"ledger {self.directory} is completed or closing; no further appends",
                reason="ledger-closed",
            )

    def _notify(self) -> None:
        self._committed.set()
        self._committed = anyio.Event()

    def _latch(self, cause: BaseException) -> LedgerWriteError:
        if self._failure is None:
            self._failure = LedgerWriteError(
                f"writing {self.directory / RECORDS} failed: {cause}; the writer is latched "
                f"failed and the ledger keeps its durable prefix (open it as an incomplete view)"
            )
            self._failure.__cause__ = cause
        return self._failure

    async def _run_committer(self) -> None:
        # Shielded: an outer cancellation must not strand appends made from shielded
        # finalization code; the committer ends when the writer closes, never before.
        try:
            with anyio.CancelScope(shield=True):
                await self._commit_until_closed()
        finally:
            self._committer_done.set()

    async def _commit_until_closed(self) -> None:
        while self._failure is None:
            if not self._open.entries:
                if self._closing:
                    return
                self._wake = anyio.Event()
                timeout = math.inf
                if self._since_checkpoint:
                    timeout = self._checkpoint_at + CHECKPOINT_EVERY_SECONDS - time.monotonic()
                with anyio.move_on_after(max(timeout, 0.0)):
                    await self._wake.wait()
                if not self._open.entries and not self._checkpoint_due():
                    continue
            batch, self._open = self._open, _Batch()
            try:
                await anyio.to_thread.run_sync(self._commit, batch)
            except Exception as exc:  # the disk failed (or a bug): nothing more is written
                failure = self._latch(exc)
                for failed in (batch, self._open):
                    failed.results[:] = [failure] * len(failed.entries)
                    failed.done.set()
            batch.done.set()
            self._notify()

    def _checkpoint_due(self) -> bool:
        return self._since_checkpoint > 0 and (
            self._since_checkpoint >= CHECKPOINT_EVERY_RECORDS
            or time.monotonic() - self._checkpoint_at >= CHECKPOINT_EVERY_SECONDS
        )

    def _commit(self, batch: _Batch) -> None:
        """Encode, chain, write and fsync one group of appends (runs in a worker thread)."""
        lines: list[bytes] = []
        results = batch.results
        encode = self._encode
        for event, producer, causation_id, correlation_id in batch.entries:
            if self._since_checkpoint >= CHECKPOINT_EVERY_RECORDS:
                lines.append(self._encode_checkpoint())
            try:
                line, record = encode(event, producer, causation_id, correlation_id)
            except LedgerEncodingError as exc:
                results.append(exc)
                continue
            lines.append(line)
            results.append(record)
        if self._checkpoint_due():
            lines.append(self._encode_checkpoint())
        if lines:
            self._write_durably(b"".join(lines))

    def _write_durably(self, data: bytes) -> None:
        self._files.write(self._fd, data)
        self._files.fsync(self._fd)
        self._records_hash.update(data)
        self._committed_bytes += len(data)
        self._durable = (self._count, self._head)

    def _encode(
        self,
        event: Event,
        producer: str,
        causation_id: str | None,
        correlation_id: str | None,
    ) -> tuple[bytes, Record]:
        elapsed = max(time.monotonic_ns() - self._started_ns, self._last_elapsed)
        sequence = self._count
        try:
            wire = event.to_wire()  # append() admitted only the catalog's classes
        except (ValueError, TypeError) as exc:
            raise _unencodable(event, exc) from exc
        envelope: dict[str, Any] = {
            "runId": self.manifest.run_id,
            "eventId": f"{self.manifest.run_id}:{sequence}",
            "logicalSequence": sequence,
            "elapsedNanos": elapsed,
            "observedAt": utc_now(),
            "producer": producer,
            "prevDigest": self._head,
            "event": wire,
        }
        if causation_id is not None:
            envelope["causationId"] = causation_id
        if correlation_id is not None:
            envelope["correlationId"] = correlation_id
        try:
            body = canonical_json(envelope)
        except (ValueError, TypeError) as exc:  # a lone surrogate, NaN, an over-long integer
            raise _unencodable(event, exc) from exc
        if len(body) > 2 * MAX_NESTING and body.count(b"[") + body.count(b"{") > MAX_NESTING:
            if nesting_depth(envelope) > MAX_NESTING:
                too_deep = ValueError(f"it nests more than {MAX_NESTING} levels deep")
                raise _unencodable(event, too_deep)
        self._last_elapsed = elapsed
        self._head = sha256_hex(body)
        self._count = sequence + 1
        self._since_checkpoint += 1
        return body + b"\n", Record.from_trusted_wire(envelope, event)

    def _encode_checkpoint(self) -> bytes:
        count, head = self._count, self._head
        signature = self._key.sign(LedgerCheckpoint.signed_bytes(self.run_id, count, head))
        checkpoint = LedgerCheckpoint(record_count=count, head_digest=head, signature=signature)
        line, _ = self._encode(checkpoint, "ledger", None, None)
        self._since_checkpoint = 0
        self._checkpoint_at = time.monotonic()
        return line

    def _final_commit(self) -> None:
        try:
            self._write_durably(self._encode_checkpoint())
        except OSError as exc:
            raise self._latch(exc) from exc
        self._files.close(self._fd)
        self._sealed = True

    def _publish_completion(self) -> LedgerReceipt:
        count, head = self._durable
        unsigned = Completion(
            ledger_format_version=LEDGER_FORMAT_VERSION,
            run_id=self.run_id,
            record_count=count,
            manifest_sha256=self._manifest_sha,
            records_sha256=self._records_hash.hexdigest(),
            head_digest=head,
            signature="",
        )
        completion = unsigned.model_copy(
            update={"signature": self._key.sign(unsigned.signed_bytes())}
        )
        try:
            self._files.publish_once(self.directory / COMPLETION, completion.canonical())
        except OSError as exc:
            raise LedgerWriteError(
                f"publishing {self.directory / COMPLETION} failed: {exc}; the records are sealed, "
                f"call complete() again to retry"
            ) from exc
        return LedgerReceipt(
            ledger_dir=str(self.directory),
            run_id=self.run_id,
            record_count=count,
            head_digest=head,
            public_key=self.public_key,
            complete=True,
        )

    def _close_incomplete(self) -> None:
        """Leave an unfinished ledger with its tail signed, as a crash would but better."""
        if self._sealed or self._abandoned:
            return
        self._abandoned = True
        if self._failure is None and self._since_checkpoint > 0:
            try:
                self._write_durably(self._encode_checkpoint())
            except OSError as exc:
                self._latch(exc)
        self._files.close(self._fd)


def _unencodable(event: Event, cause: Exception) -> LedgerEncodingError:
    return LedgerEncodingError(
        f"event {type(event).tag} cannot be written to the ledger: {cause}; the event was not "
        f"recorded (the ledger format takes canonical JSON: UTF-8 text without lone surrogates, "
        f"no NaN or infinities, at most {MAX_NESTING} levels of nesting)"
    )


def _read_range(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(start)
        return handle.read(end - start)


@asynccontextmanager
async def open_ledger_writer(
    directory: Path,
    *,
    catalog: EventCatalog,
    definition_id: str,
    run_id: str,
    provenance: Provenance,
    metadata: Mapping[str, Any] | None = None,
    signing_key: SigningKey | None = None,
    files: DurableFiles | None = None,
) -> AsyncIterator[LedgerWriter]:
    """Create a new ledger at ``directory`` (never overwriting one) and yield its writer.

    The signing key is generated fresh unless an operator's key is passed; it is never written
    into the ledger directory. Leaving the block without ``complete()`` leaves an incomplete
    ledger whose tail is signed by a final checkpoint.
    """
    files = files or DurableFiles()
    key = signing_key or SigningKey.generate()
    merged = EventCatalog.merge(ledger_catalog, catalog)
    canonical_json(dict(metadata or {}))  # refuses NaN and non-JSON metadata before anything exists
    manifest = Manifest(
        ledger_format_version=LEDGER_FORMAT_VERSION,
        definition_id=definition_id,
        run_id=run_id,
        ledger_ref=directory.name,
        catalog_tags=merged.tags,
        created_at=utc_now(),
        provenance=provenance,
        metadata=dict(metadata or {}),
        public_key=key.public_key,
    )
    manifest_bytes = manifest.canonical()

    def create() -> int:
        files.make_directory(directory)
        files.write_new_file(directory / MANIFEST, manifest_bytes)
        fd = files.create(directory / RECORDS)
        files.fsync(fd)
        files.fsync_directory(directory)
        return fd

    fd = await anyio.to_thread.run_sync(create)
    writer = LedgerWriter(directory, merged, manifest, manifest_bytes, key, files, fd)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(writer._run_committer)
            try:
                yield writer
            finally:
                if writer._completion is None:
                    writer._closing = True
                    writer._wake.set()
    finally:
        if writer._completion is None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(writer._close_incomplete)
                writer._finished = True
                writer._notify()
