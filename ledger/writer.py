"""The durable ledger writer: exclusive create, group commit, signed checkpoints, live followers."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ledger.canonical import canonical_json, sha256_hex
from ledger.encoder import RecordEncoder
from ledger.errors import LedgerEncodingError, LedgerError, LedgerWriteError
from ledger.events import Event, EventCatalog
from ledger.format import (
    COMPLETION,
    LEDGER_FORMAT_VERSION,
    MANIFEST,
    RECORDS,
    Completion,
    Manifest,
    Provenance,
    utc_now,
)
from ledger.pipeline import CommitPipeline
from ledger.records import LedgerReceipt, Record, ledger_catalog, parse_record_lines
from ledger.signer import Signer, SignerProcess, SignerSocket
from ledger.signing import SigningKey
from ledger.storage import DurableFiles

E = TypeVar("E", bound=Event)

AppendOutcome = Record | BaseException
"""What an append came to: its durable record, or why it was not written."""
_Entry = tuple[Event, str, str | None, str | None]  # event, producer, causation, correlation
_log = logging.getLogger("ledger.writer")


@dataclass(slots=True, eq=False)
class _Batch:
    """Appends that commit together: one write, one fsync, one wake-up for all their callers."""

    entries: list[_Entry] = field(default_factory=list)
    then: list[Callable[[AppendOutcome], None] | None] = field(default_factory=list)
    results: list[AppendOutcome] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)
    end: tuple[int, str, int] = (0, "", 0)
    """The chain once this batch is durable: record count, head digest, bytes of records.ndjson."""
    synced: bool = False
    """Its bytes are durable (by its own fsync or a later commit's); it settles in its turn."""

    def settle(self) -> None:
        """Wake the batch's waiters, then call its callbacks in record order."""
        self.done.set()
        for then, result in zip(self.then, self.results, strict=True):
            if then is not None:
                try:
                    then(result)
                except Exception:  # a caller's bug must not stop the commits of others
                    _log.exception("a ledger append callback failed")


class LedgerWriter:
    """Appends records durably. Create it with ``open_ledger_writer``; do not construct directly."""

    def __init__(
        self,
        directory: Path,
        catalog: EventCatalog,
        manifest: Manifest,
        manifest_bytes: bytes,
        signing_key: Signer,
        files: DurableFiles,
        records_fd: int,
        *,
        own_process: bool = True,
    ) -> None:
        self.directory = directory
        self.catalog = EventCatalog.merge(ledger_catalog, catalog)
        self._classes = frozenset(self.catalog)  # the hot path's membership test
        self.manifest = manifest
        self._key = signing_key
        self._files = files
        self._fd = records_fd
        self._manifest_sha = sha256_hex(manifest_bytes)
        # The chain's position: advanced on the event loop as each batch is encoded.
        self._encoder = RecordEncoder(manifest.run_id, self._manifest_sha, signing_key)
        # What is durable (count, head), one tuple so no reader sees half an update; only this
        # reaches followers, receipts and record_count.
        self._durable = (0, self._manifest_sha)
        self._committed_bytes = 0
        self._encoded_bytes = 0
        self._loop = asyncio.get_running_loop()
        self._pipeline = CommitPipeline(
            files,
            records_fd,
            own_process=own_process,
            on_durable=self._durable_batch,
            on_failure=self._fail,
        )
        self._open = _Batch()
        self._in_flight: deque[_Batch] = deque()  # encoded, not settled yet, in record order
        self._commit_soon: asyncio.Handle | None = None  # the open batch's commit, scheduled
        self._checkpoint_timer: asyncio.TimerHandle | None = None
        self._committed = anyio.Event()
        self._failure: LedgerWriteError | None = None
        self._completion: LedgerReceipt | None = None
        self._completion_lock = anyio.Lock()
        self._closing = False  # no new appends
        self._sealed = False  # final checkpoint written and records.ndjson closed by complete()
        self._abandoned = False  # the block was left without complete(); records.ndjson closed
        self._finished = False  # followers stop once caught up

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def public_key(self) -> str:
        return self._key.public_key

    @property
    def sync_process_pid(self) -> int | None:
        """The process that writes and fsyncs records.ndjson (None: a thread, for a seam)."""
        process = self._pipeline.process
        return None if process is None else process.pid

    @property
    def signer_pid(self) -> int | None:
        """The ledger's signer process (None: a key object signs in this process)."""
        return self._key.pid if isinstance(self._key, SignerProcess) else None

    @property
    def sync_count(self) -> int:
        """fsyncs of records.ndjson so far, each making one or more group commits durable."""
        return self._pipeline.syncs

    @property
    def record_count(self) -> int:
        """Durable records so far (checkpoints included)."""
        return self._durable[0]

    @property
    def unsettled(self) -> int:
        """Batches encoded and sent to be written that are not durable yet (0: nothing waits)."""
        return len(self._in_flight) + (1 if self._open.entries else 0)

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
        batch = self._queue(event, producer, causation_id, correlation_id, None)
        index = len(batch.entries) - 1
        await batch.done.wait()
        result = batch.results[index]
        if isinstance(result, Record):
            return result
        raise result

    def append_soon(
        self,
        event: Event,
        *,
        producer: str,
        then: Callable[[AppendOutcome], None] | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> None:
        """Queue ``event`` for the next group commit without waiting for it.

        ``then`` runs on the event loop once the record and all before it are durable, with
        the record, or with the error that kept it out (``LedgerEncodingError`` for this event
        alone, ``LedgerWriteError`` once the disk failed). Callbacks run in record order, so a
        caller can act on commits in the order it appended. A ledger already closed or failed
        raises here, as ``append`` would.
        """
        self._queue(event, producer, causation_id, correlation_id, then)

    async def flushed(self) -> None:
        """Return once everything appended so far is durable (or the writer failed)."""
        batch = self._open if self._open.entries else None
        if batch is None and self._in_flight:
            batch = self._in_flight[-1]
        if batch is not None:
            await batch.done.wait()

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
                await self._finish_pipeline()
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

    def _queue(
        self,
        event: Event,
        producer: str,
        causation_id: str | None,
        correlation_id: str | None,
        then: Callable[[AppendOutcome], None] | None,
    ) -> _Batch:
        if self._closing or self._failure is not None:
            self._check_open()
        if type(event) not in self._classes:
            self.catalog.encode(event)  # raises the catalog's typed error
        batch = self._open
        if not batch.entries and self._commit_soon is None:
            self._commit_soon = self._loop.call_soon(self._commit)
        batch.entries.append((event, producer, causation_id, correlation_id))
        batch.then.append(then)
        return batch

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

    def _commit(self) -> None:
        """Encode the open batch now, in chain order, and send it to be written and fsynced.

        Scheduled on the event loop by the first append to an empty batch (appends made before
        it runs share the batch) and by a checkpoint falling due; it never waits for the disk.
        """
        self._commit_soon = None
        if self._failure is not None or self._sealed or self._abandoned:
            return
        if self._open.entries or self._encoder.checkpoint_due():
            batch = self._open
            self._open = _Batch()
            self._in_flight.append(batch)
            try:
                data = self._encode(batch)
            except Exception as exc:  # a bug: nothing more is written
                self._fail(exc)
                return
            self._encoded_bytes += len(data)
            batch.end = (self._encoder.count, self._encoder.head, self._encoded_bytes)
            if data:
                try:
                    self._pipeline.send(data, batch)
                except OSError as exc:  # the sync process is gone: nothing more is written
                    self._fail(exc)
                    return
            else:  # every entry was refused: nothing to write, and no fsync to vouch for
                batch.synced = True  # the batches before it; it settles in its turn
                self._settle_synced()
        if (
            self._checkpoint_timer is None
            and self._encoder.pending_checkpoint
            and not self._closing
        ):
            self._checkpoint_timer = self._loop.call_later(
                max(self._encoder.seconds_to_checkpoint(), 0.0), self._checkpoint_fell_due
            )

    def _checkpoint_fell_due(self) -> None:
        self._checkpoint_timer = None
        if self._commit_soon is None:
            self._commit()  # commits a checkpoint if one is due by now, or waits for it again

    def _durable_batch(self, batch: _Batch) -> None:
        """The pipeline reports ``batch`` durable: it and every batch sent before it."""
        if self._failure is not None:
            return
        for earlier in self._in_flight:
            earlier.synced = True
            if earlier is batch:
                break
        self._settle_synced()

    async def _finish_pipeline(self) -> None:
        """End the sync process once every commit settled; its failure latches the writer."""
        if self._checkpoint_timer is not None:
            self._checkpoint_timer.cancel()
            self._checkpoint_timer = None
        if self._commit_soon is not None:  # the open batch goes now, not in a later turn
            self._commit_soon.cancel()
            self._commit()
        while self._in_flight:  # nothing new is sent once closing: these are the last
            await self._in_flight[-1].done.wait()
        try:
            await self._pipeline.finish()
        except OSError as exc:
            self._latch(exc)

    def _settle_synced(self) -> None:
        """Settle the durable batches at the head of the pipeline, in record order."""
        in_flight = self._in_flight
        if not in_flight or not in_flight[0].synced:
            return
        while in_flight and in_flight[0].synced:
            batch = in_flight.popleft()
            count, head, self._committed_bytes = batch.end
            self._durable = (count, head)
            batch.settle()
        self._notify()

    def _fail(self, cause: BaseException) -> None:
        """Latch the writer failed: every batch not settled yet, and the open one, fails."""
        failure = self._latch(cause)
        for failed in (*self._in_flight, self._open):
            failed.results[:] = [failure] * len(failed.entries)
            failed.settle()
        self._in_flight.clear()
        self._notify()

    def _encode(self, batch: _Batch) -> bytes:
        """One group of appends as chained lines, a checkpoint among them where one is due.

        Runs on the event loop: the encoding holds the GIL wherever it runs, and here it costs
        no hand-over between threads; only the write and the fsync go to the sync process.
        """
        lines: list[bytes] = []
        results = batch.results
        encoder = self._encoder
        encode = encoder.encode
        for event, producer, causation_id, correlation_id in batch.entries:
            if encoder.checkpoint_full():
                lines.append(encoder.encode_checkpoint())
            try:
                line, record = encode(event, producer, causation_id, correlation_id)
            except LedgerEncodingError as exc:
                results.append(exc)
                continue
            lines.append(line)
            results.append(record)
        if encoder.checkpoint_due():
            lines.append(encoder.encode_checkpoint())
        return b"".join(lines)

    def _write_durably(self, data: bytes) -> None:
        """Write and fsync the last checkpoint, once nothing is in flight."""
        self._pipeline.write_now(data)
        self._committed_bytes += len(data)
        self._durable = (self._encoder.count, self._encoder.head)

    def _final_commit(self) -> None:
        try:
            self._write_durably(self._encoder.encode_checkpoint())
        except OSError as exc:
            raise self._latch(exc) from exc
        self._close_files()
        self._sealed = True

    def _close_files(self) -> None:
        self._files.close(self._fd)

    def _publish_completion(self) -> LedgerReceipt:
        count, head = self._durable
        unsigned = Completion(
            ledger_format_version=LEDGER_FORMAT_VERSION,
            run_id=self.run_id,
            record_count=count,
            manifest_sha256=self._manifest_sha,
            records_sha256=self._pipeline.records_hash.hexdigest(),
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
        if self._failure is None and self._encoder.pending_checkpoint:
            try:
                self._write_durably(self._encoder.encode_checkpoint())
            except (OSError, LedgerError) as exc:  # the disk, or the signer: the tail is unsigned
                self._latch(exc)
        self._close_files()


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
    signing_key_file: str | Path | None = None,
    signer_socket: str | Path | None = None,
    files: DurableFiles | None = None,
) -> AsyncIterator[LedgerWriter]:
    """Create a new ledger at ``directory`` (never overwriting one) and yield its writer.

    The key stays out of this process: the ledger's signer process (``ledger.signer``)
    generates a fresh one, or reads the operator's ``signing_key_file``, and signs only this
    run's checkpoints and completion. ``signer_socket`` names a signer that listens beside this
    process instead (``signer_process --listen``: on a cluster, the container that alone mounts
    the operator's key). A ``signing_key`` object signs here instead (the key is then in this
    process already). No key is ever written into the ledger directory. Leaving
    the block without ``complete()`` leaves an incomplete ledger whose tail is signed by a
    final checkpoint.
    """
    own_process = files is None  # a caller's DurableFiles sees every write and fsync itself
    files = files or DurableFiles()
    if signing_key is not None:
        key: Signer = signing_key
    elif signer_socket is not None:
        key = await anyio.to_thread.run_sync(SignerSocket.connect, signer_socket)
    else:
        key = SignerProcess.spawn(run_id, signing_key_file)  # on the loop's thread, which stays
        await anyio.to_thread.run_sync(key.wait_ready)  # closes the signer when it fails
    try:
        async with _writing(
            directory, catalog, definition_id, run_id, provenance, metadata, key, files, own_process
        ) as writer:
            yield writer
    finally:
        if isinstance(key, SignerProcess | SignerSocket):  # after the completion's signature
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(key.close)


@asynccontextmanager
async def _writing(
    directory: Path,
    catalog: EventCatalog,
    definition_id: str,
    run_id: str,
    provenance: Provenance,
    metadata: Mapping[str, Any] | None,
    key: Signer,
    files: DurableFiles,
    own_process: bool,
) -> AsyncIterator[LedgerWriter]:
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
    writer = LedgerWriter(
        directory, merged, manifest, manifest_bytes, key, files, fd, own_process=own_process
    )
    try:
        yield writer
    finally:
        if writer._completion is None:
            with anyio.CancelScope(shield=True):
                writer._closing = True  # what was appended before it ended is committed
                await writer._finish_pipeline()
                await anyio.to_thread.run_sync(writer._close_incomplete)
                writer._finished = True
                writer._notify()
