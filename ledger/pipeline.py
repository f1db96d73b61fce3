"""Group commits in flight: written to records.ndjson in order, fsynced several at once.

One fsync at a time made every record wait for the fsync in flight and then its own, and the
worker thread had to win the GIL from a busy event loop before it could start the next. Here up
to ``depth`` commits are in flight: each is written in its turn (so the file is the chain, byte
for byte, with no gaps) and then fsynced on its own open file description, while the next one is
written. An fsync that returns makes durable every byte written before it started, so a commit
is durable once its own fsync, or any later commit's, has returned.

Each slot fsyncs its own file description because Linux reports a writeback error once per
open file description: two fsyncs racing on one description could let one of them return
success for pages whose writeback the other was told had failed.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import anyio
import anyio.to_thread

from ledger.storage import DurableFiles

PIPELINE_DEPTH = 4
"""Commits written or being fsynced at once (on the benchmark VM a lone writer's fsync took
4 ms, four overlapping ones 0.3 ms each)."""


class CommitPipeline:
    """Writes commits in ticket order and fsyncs up to ``depth`` of them at once."""

    def __init__(self, files: DurableFiles, fd: int, path: Path, depth: int = PIPELINE_DEPTH):
        self._files = files
        self._fd = fd
        self.sync_fds = [files.open_for_sync(path) for _ in range(depth)]
        """One descriptor per commit in flight, each fsynced by one committer only."""
        self._limiter = anyio.CapacityLimiter(depth)  # never waits: one commit per descriptor
        self._turn = threading.Condition()
        self._tickets = 0  # handed out, on the event loop
        self._written = 0  # written so far, in the worker threads
        self._broken: BaseException | None = None  # a write failed: no later one may follow it
        self.records_hash = hashlib.sha256()
        """SHA-256 of every byte written, in file order."""

    def next_ticket(self) -> int:
        """The place of the next commit in the file; commits are written in ticket order."""
        self._tickets += 1
        return self._tickets

    async def commit(self, sync_fd: int, ticket: int, data: bytes) -> None:
        """Write ``data`` after every earlier ticket's, then fsync it on ``sync_fd``."""
        await anyio.to_thread.run_sync(
            self._write_and_sync, sync_fd, ticket, data, limiter=self._limiter
        )

    def _write_and_sync(self, sync_fd: int, ticket: int, data: bytes) -> None:
        with self._turn:
            while self._written != ticket - 1:
                self._turn.wait()
            try:
                if self._broken is not None:
                    raise OSError(f"an earlier group commit could not be written: {self._broken}")
                self._files.write(self._fd, data)
                self.records_hash.update(data)
            except BaseException as exc:
                self._broken = exc
                raise
            finally:
                self._written = ticket
                self._turn.notify_all()
        self._files.fsync(sync_fd)

    def write_now(self, data: bytes) -> None:
        """Write and fsync ``data`` on the caller's thread; only while nothing is in flight."""
        self._files.write(self._fd, data)
        self.records_hash.update(data)
        self._files.fsync(self._fd)

    def close(self) -> None:
        """Close the committers' descriptors (once nothing is in flight)."""
        for fd in self.sync_fds:
            self._files.close(fd)
        self.sync_fds.clear()
