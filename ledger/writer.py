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

from ledger.canonical import canonical_json, sha256_hex
from ledger.errors import LedgerError, LedgerWriteError
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
    RecordEnvelope,
    utc_now,
)
from ledger.records import LedgerReceipt, Record, ledger_catalog, parse_record_lines
from ledger.signing import SigningKey
from ledger.storage import DurableFiles

E = TypeVar("E", bound=Event)


@dataclass(slots=True)
class _Append:
    event: Event
    producer: str
    causation_id: str | None
    correlation_id: str | None
    done: anyio.Event = field(default_factory=anyio.Event)
    record: Record | None = None
    error: BaseException | None = None


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
        self.manifest = manifest
        self._key = signing_key
        self._files = files
        self._fd = records_fd
        self._started_ns = time.monotonic_ns()
        self._last_elapsed = 0
        self._manifest_sha = sha256_hex(manifest_bytes)
        self._head = self._manifest_sha
        self._records_hash = hashlib.sha256()
        self._count = 0
        self._committed_bytes = 0
        self._since_checkpoint = 0
        self._checkpoint_at = time.monotonic()
        self._pending: list[_Append] = []
        self._wake = anyio.Event()
        self._committed = anyio.Event()
        self._failure: LedgerWriteError | None = None
        self._completion: LedgerReceipt | None = None
        self._closing = False
        self._finished = False
        self._committer_done = anyio.Event()

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def public_key(self) -> str:
        return self._key.public_key

    @property
    def record_count(self) -> int:
        return self._count

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
        self._check_open()
        if type(event) not in self.catalog:
            self.catalog.encode(event)  # raises the catalog's typed error
        pending = _Append(event, producer, causation_id, correlation_id)
        self._pending.append(pending)
        self._wake.set()
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.record is not None
        return pending.record

    async def complete(self) -> LedgerReceipt:
        """Flush, write the final checkpoint and the signed completion file. Idempotent."""
        if self._completion is not None:
            await anyio.to_thread.run_sync(self._publish_completion)
            return self._completion
        self._check_open()
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
        """What the ledger proves right now: complete, or a prefix signed up to a checkpoint."""
        if self._completion is not None:
            return self._completion
        return LedgerReceipt(
            ledger_dir=str(self.directory),
            run_id=self.run_id,
            record_count=self._count,
            head_digest=self._head,
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

    async def _run_committer(self) -> None:
        try:
            while self._failure is None:
                if not self._pending:
                    if self._closing:
                        return
                    self._wake = anyio.Event()
                    timeout = math.inf
                    if self._since_checkpoint:
                        timeout = self._checkpoint_at + CHECKPOINT_EVERY_SECONDS - time.monotonic()
                    with anyio.move_on_after(max(timeout, 0.0)):
                        await self._wake.wait()
                    if not self._pending and not self._checkpoint_due():
                        continue
                batch, self._pending = self._pending, []
                try:
                    await anyio.to_thread.run_sync(self._commit, batch)
                except OSError as exc:
                    self._failure = LedgerWriteError(
                        f"writing {self.directory / RECORDS} failed: {exc}; the writer is latched "
                        f"failed and the ledger keeps its durable prefix"
                    )
                    for pending in [*batch, *self._pending]:
                        pending.error = self._failure
                        pending.done.set()
                    self._pending = []
                for pending in batch:
                    pending.done.set()
                self._notify()
        finally:
            self._committer_done.set()

    def _checkpoint_due(self) -> bool:
        return self._since_checkpoint > 0 and (
            self._since_checkpoint >= CHECKPOINT_EVERY_RECORDS
            or time.monotonic() - self._checkpoint_at >= CHECKPOINT_EVERY_SECONDS
        )

    def _commit(self, batch: list[_Append]) -> None:
        """Encode, chain, write and fsync one group of appends (runs in a worker thread)."""
        lines: list[bytes] = []
        committed: list[tuple[_Append, Record]] = []
        for pending in batch:
            if self._since_checkpoint >= CHECKPOINT_EVERY_RECORDS:
                lines.append(self._encode_checkpoint())
            try:
                line, record = self._encode(
                    pending.event, pending.producer, pending.causation_id, pending.correlation_id
                )
            except (LedgerError, ValueError, TypeError) as exc:
                pending.error = exc
                continue
            lines.append(line)
            committed.append((pending, record))
        if self._checkpoint_due():
            lines.append(self._encode_checkpoint())
        if not lines:
            return
        data = b"".join(lines)
        self._files.write(self._fd, data)
        self._files.fsync(self._fd)
        self._records_hash.update(data)
        self._committed_bytes += len(data)
        for pending, record in committed:
            pending.record = record

    def _encode(
        self,
        event: Event,
        producer: str,
        causation_id: str | None,
        correlation_id: str | None,
    ) -> tuple[bytes, Record]:
        wire = self.catalog.encode(event)
        elapsed = max(time.monotonic_ns() - self._started_ns, self._last_elapsed)
        envelope: dict[str, Any] = {
            "runId": self.run_id,
            "eventId": f"{self.run_id}:{self._count}",
            "logicalSequence": self._count,
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
        body = canonical_json(envelope)
        self._last_elapsed = elapsed
        self._head = sha256_hex(body)
        self._count += 1
        self._since_checkpoint += 1
        record = Record(RecordEnvelope.model_validate(envelope), event)
        return body + b"\n", record

    def _encode_checkpoint(self) -> bytes:
        count, head = self._count, self._head
        signature = self._key.sign(LedgerCheckpoint.signed_bytes(self.run_id, count, head))
        checkpoint = LedgerCheckpoint(record_count=count, head_digest=head, signature=signature)
        line, _ = self._encode(checkpoint, "ledger", None, None)
        self._since_checkpoint = 0
        self._checkpoint_at = time.monotonic()
        return line

    def _final_commit(self) -> None:
        data = self._encode_checkpoint()
        self._files.write(self._fd, data)
        self._files.fsync(self._fd)
        self._records_hash.update(data)
        self._committed_bytes += len(data)
        self._files.close(self._fd)

    def _publish_completion(self) -> LedgerReceipt:
        unsigned = Completion(
            ledger_format_version=LEDGER_FORMAT_VERSION,
            run_id=self.run_id,
            record_count=self._count,
            manifest_sha256=self._manifest_sha,
            records_sha256=self._records_hash.hexdigest(),
            head_digest=self._head,
            signature="",
        )
        completion = unsigned.model_copy(
            update={"signature": self._key.sign(unsigned.signed_bytes())}
        )
        self._files.publish_once(self.directory / COMPLETION, completion.canonical())
        return LedgerReceipt(
            ledger_dir=str(self.directory),
            run_id=self.run_id,
            record_count=self._count,
            head_digest=self._head,
            public_key=self.public_key,
            complete=True,
        )

    def _close_incomplete(self) -> None:
        """Leave an unfinished ledger with its tail signed, as a crash would but better."""
        if self._failure is None and self._since_checkpoint > 0:
            try:
                data = self._encode_checkpoint()
                self._files.write(self._fd, data)
                self._files.fsync(self._fd)
                self._committed_bytes += len(data)
            except OSError:
                pass
        self._files.close(self._fd)


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
    canonical_json(manifest.metadata)  # refuses NaN and non-JSON metadata before anything exists

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
