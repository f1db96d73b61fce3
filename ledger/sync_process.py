"""The ledger's sync process: appends what its writer sends to records.ndjson, fsyncs, reports.

The writer's event loop encodes each group commit and writes its bytes to a pipe; this process
reads whatever waits there, appends it to records.ndjson in one write, fsyncs, and answers with
the number of bytes now durable. While one fsync runs the next commits queue in the pipe, so
they share the next fsync (group commit). Nothing here needs the writer's GIL: the event loop
never waits for a thread of its own to win it back after an fsync.

The protocol, both ways over pipes: in, the records' bytes, in chain order, nothing else; out,
8-byte counts of bytes durable so far, or ``FAILED`` followed by the errno (4 bytes, signed) and
a frame holding the UTF-8 message of the error that stopped it; numbers and frames as
``society_sandbox.framing`` writes them (big-endian). The writer closing its end means no more
commits: this process exits once everything read is durable.

This module imports only the standard library and the wall's framing: the child starts with
``python -I -S`` and must not load the package (or a researcher's site-packages) to append bytes
to a file.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from typing import Protocol

if __name__ == "__main__":  # a script (python -I -S): the wall beside the ledger, for its framing
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from society_sandbox.framing import ORDER, framed

FAILED = 2**64 - 1
"""Sent in place of a durable count when a write or an fsync failed; the failure follows it."""
DURABLE = struct.Struct(ORDER + "Q")
FAILURE = struct.Struct(ORDER + "Qi")  # FAILED, errno; then the message, framed
READ_BYTES = 1 << 20


class RecordFiles(Protocol):
    """The two operations this process needs (``ledger.storage.DurableFiles`` has both)."""

    def write(self, fd: int, data: bytes) -> None: ...

    def fsync(self, fd: int) -> None: ...


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` (a regular file may take fewer than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(files: RecordFiles, records_fd: int, commits: int, replies: int) -> None:
    """Append, fsync and report until ``commits`` ends or an operation fails; closes both pipes."""
    durable = 0
    try:
        while data := os.read(commits, READ_BYTES):
            try:
                files.write(records_fd, data)
                files.fsync(records_fd)
            except Exception as exc:  # the writer gets every failure, typed by its errno
                _report_failure(replies, exc)
                return
            durable += len(data)
            write_all(replies, DURABLE.pack(durable))
    except BrokenPipeError:
        return  # the writer is gone; what was written stays as a crash would leave it
    finally:
        os.close(commits)
        os.close(replies)


def _report_failure(replies: int, exc: Exception) -> None:
    if isinstance(exc, OSError):
        number, text = exc.errno or 0, exc.strerror or str(exc)
    else:
        number, text = 0, f"{type(exc).__name__}: {exc}"
    message = text.encode("utf-8", "backslashreplace")
    try:
        write_all(replies, FAILURE.pack(FAILED, number) + framed(message))
    except BrokenPipeError:
        pass


class _PosixFiles:
    write = staticmethod(write_all)
    fsync = staticmethod(os.fsync)


def die_with(parent: int) -> None:
    """SIGKILL this process when its writer's thread dies: it never outlives its writer."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (ImportError, OSError, AttributeError):
        pass  # not Linux: the closed pipe still ends it once the writer is gone
    if os.getppid() != parent:
        sys.exit(0)  # the writer died before the line above took effect


def main() -> None:
    """``python -I -S sync_process.py RECORDS_FD WRITER_PID``: commits in on 0, replies out on 1."""
    records_fd, parent = int(sys.argv[1]), int(sys.argv[2])
    die_with(parent)
    serve(_PosixFiles(), records_fd, 0, 1)


if __name__ == "__main__":
    main()
