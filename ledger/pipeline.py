"""Group commits in flight: sent to the ledger's sync process, settled as it reports them durable.

Before, each commit's write and fsync ran on a worker thread of the writer's own process, and
that thread had to win the GIL from a busy event loop to start, between the write and the fsync,
and again to hand the commit back: under load those waits cost more than the fsync. Now the event
loop writes each commit's bytes to a pipe and the sync process (``ledger.sync_process``), with
an interpreter and a GIL of its own, appends, fsyncs and reports the durable length; the loop
learns of it through its selector, like a socket's data. The pipe keeps the chain's order, and
whatever queues in it during one fsync shares the next.

With a ``DurableFiles`` of its own (a test's, to record or fail the writes and fsyncs; a
benchmark's that writes nowhere) the same loop runs on a thread of this process instead, so the
substitute sees every operation. Either way the writer's side is this class, over the same pipes.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.to_thread

from ledger import sync_process
from ledger.storage import DurableFiles
from society_sandbox.framing import frame_at

_SCRIPT = Path(sync_process.__file__)
PIPE_BYTES = 1 << 20
"""Asked of the kernel for the commit pipe (Linux's default cap for an unprivileged process)."""
_F_SETPIPE_SZ = 1031


class SyncProcessError(OSError):
    """The sync process ended without reporting a failure (killed, or it crashed)."""


class CommitPipeline:
    """Sends commits in chain order and reports each, in order, once its bytes are durable.

    Make it on the event loop that runs the writer: ``on_durable(token)`` and, at most once,
    ``on_failure(error)`` are called there. ``own_process`` runs the sync loop in a child process
    (what a ledger does), otherwise on a thread with ``files``.
    """

    def __init__(
        self,
        files: DurableFiles,
        fd: int,
        *,
        own_process: bool,
        on_durable: Callable[[Any], None],
        on_failure: Callable[[OSError], None],
    ) -> None:
        self._files = files
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        commits_in, self._commits = os.pipe()
        self._replies, replies_out = os.pipe()
        _widen(self._commits)
        self.process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        try:
            if own_process:
                # Started from the loop's thread: the child dies with that thread (PDEATHSIG).
                self.process = subprocess.Popen(
                    [sys.executable, "-I", "-S", str(_SCRIPT), str(fd), str(os.getpid())],
                    stdin=commits_in,
                    stdout=replies_out,
                    pass_fds=(fd,),
                    start_new_session=True,  # a terminal's Ctrl-C reaches the writer, not it
                )
            else:
                self._thread = threading.Thread(
                    target=sync_process.serve,
                    args=(files, fd, commits_in, replies_out),
                    name="ledger-sync",
                    daemon=True,
                )
                self._thread.start()
        except BaseException:
            for end in (commits_in, replies_out, self._commits, self._replies):
                os.close(end)
            raise
        if self.process is not None:
            os.close(commits_in)
            os.close(replies_out)
        os.set_blocking(self._commits, False)
        os.set_blocking(self._replies, False)
        self._loop.add_reader(self._replies, self._on_replies)
        self._unsent = bytearray()  # what the pipe could not take yet, sent when it can
        self._sent = 0
        self._waiting: deque[tuple[int, Any]] = deque()  # (bytes once durable, token)
        self._heard = b""
        self._failure: OSError | None = None
        self._finished = False
        self.records_hash = hashlib.sha256()
        """SHA-256 of every byte committed, in file order."""
        self.syncs = 0
        """fsyncs of records.ndjson reported so far (each makes one or more commits durable)."""

    def send(self, data: bytes, token: Any) -> None:
        """Send ``data`` after every earlier commit's; ``on_durable(token)`` once it is durable."""
        if self._failure is not None or self._finished:
            raise self._failure or SyncProcessError("the ledger's commit pipeline is closed")
        self._sent += len(data)
        self.records_hash.update(data)
        self._waiting.append((self._sent, token))
        self._send(data)

    def _send(self, data: bytes) -> None:
        if self._unsent:
            self._unsent += data
            return
        try:
            sent = os.write(self._commits, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:  # the sync process is gone
            self._stop(self._ended(exc))
            return
        if sent < len(data):
            self._unsent += data[sent:]
            self._loop.add_writer(self._commits, self._send_unsent)

    def _send_unsent(self) -> None:
        try:
            sent = os.write(self._commits, self._unsent)
        except BlockingIOError:
            return
        except OSError as exc:
            self._stop(self._ended(exc))
            return
        del self._unsent[:sent]
        if not self._unsent:
            self._loop.remove_writer(self._commits)

    def _on_replies(self) -> None:
        try:
            heard = os.read(self._replies, 1 << 16)
        except BlockingIOError:
            return
        if not heard:
            self._stop(self._ended())
            return
        data, offset, durable = self._heard + heard, 0, -1
        while len(data) - offset >= sync_process.DURABLE.size:
            (value,) = sync_process.DURABLE.unpack_from(data, offset)
            if value != sync_process.FAILED:
                durable = value
                offset += sync_process.DURABLE.size
                self.syncs += 1
                continue
            if len(data) - offset < sync_process.FAILURE.size:
                break
            _, number = sync_process.FAILURE.unpack_from(data, offset)
            message = frame_at(data, offset + sync_process.FAILURE.size)
            if message is None:
                break
            self._settle(durable)
            self._stop(OSError(number, message[0].decode()))
            return
        self._heard = data[offset:]
        self._settle(durable)

    def _settle(self, durable: int) -> None:
        waiting = self._waiting
        while waiting and waiting[0][0] <= durable:
            self._on_durable(waiting.popleft()[1])

    def _ended(self, cause: OSError | None = None) -> OSError:
        """The sync loop ended without a failure report: how, as far as this process can tell."""
        code = None
        if self.process is not None:
            try:  # its pipes close as it exits, a moment before its status is there to read
                code = self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        how = "" if cause is None else f" ({cause.strerror or cause})"
        if code is not None:
            how = f" (exit status {code})" if code >= 0 else f" (killed by signal {-code})"
        return SyncProcessError(
            f"the ledger's sync process ended before its commits were durable{how}"
        )

    def _stop(self, failure: OSError) -> None:
        """No commit will be reported durable any more: the writer fails what still waits."""
        if self._failure is not None:
            return
        self._failure = failure
        self._loop.remove_reader(self._replies)
        if self._unsent:
            self._unsent.clear()
            self._loop.remove_writer(self._commits)
        self._waiting.clear()
        self._on_failure(failure)

    async def finish(self) -> None:
        """Stop the sync loop once nothing is in flight and wait for it; raises its failure.

        Idempotent. Afterwards only ``write_now`` writes, on the caller's thread.
        """
        if not self._finished:
            self._finished = True
            self._loop.remove_reader(self._replies)
            if self._unsent:
                self._loop.remove_writer(self._commits)
            os.close(self._commits)  # the sync loop fsyncs what it read, then sees the end
            await anyio.to_thread.run_sync(self._join)
            os.close(self._replies)
            if self._failure is None and self.process is not None and self.process.returncode:
                self._failure = self._ended()
        if self._failure is not None:
            raise self._failure

    def _join(self) -> None:
        if self.process is not None:
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:  # wedged in an fsync: nothing more is waited for
                self.process.kill()
                self.process.wait()
        elif self._thread is not None:
            self._thread.join(timeout=60)

    def write_now(self, data: bytes) -> None:
        """Write and fsync ``data`` on the caller's thread; only once ``finish`` has returned."""
        self._files.write(self._fd, data)
        self.records_hash.update(data)
        self._files.fsync(self._fd)


def _widen(fd: int) -> None:
    """Let ``fd``'s pipe hold ``PIPE_BYTES`` in flight, where the kernel allows it."""
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # not Linux, or over the cap
        pass  # the default (64 KiB) works; a full pipe only makes the writer wait to send
