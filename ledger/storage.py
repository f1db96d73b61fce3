"""The I/O seam of the durable writer: every write, fsync and rename goes through ``DurableFiles``.

Tests substitute a recording subclass to check that durability calls happen, and in what order;
SIGKILL alone cannot show a missing fsync because the page cache survives it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ledger.errors import LedgerCompletionConflict, LedgerExistsError
from ledger.sync_process import write_all


class DurableFiles:
    """Real POSIX file operations, one method per durability step."""

    def make_directory(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path)
        except FileExistsError:
            raise LedgerExistsError(
                f"{path} already exists; a ledger is never overwritten, choose a new ledger ref",
            ) from None
        self.fsync_directory(path.parent)

    def create(self, path: Path) -> int:
        """Create a new file exclusively, opened for appending."""
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)

    def write(self, fd: int, data: bytes) -> None:
        write_all(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fsync_directory(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write_new_file(self, path: Path, data: bytes) -> None:
        """Exclusive create, write, fsync, close, then fsync the directory."""
        fd = self.create(path)
        try:
            self.write(fd, data)
            self.fsync(fd)
        finally:
            self.close(fd)
        self.fsync_directory(path.parent)

    def publish_once(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically; if it exists it must hold exactly ``data``."""
        temp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = self.create(temp)
        try:
            self.write(fd, data)
            self.fsync(fd)
        finally:
            self.close(fd)
        try:
            os.link(temp, path)
        except FileExistsError:
            if path.read_bytes() != data:
                raise LedgerCompletionConflict(
                    f"{path} already exists with different content; the ledger was completed "
                    f"differently before and is left as it is",
                ) from None
        finally:
            os.unlink(temp)
        self.fsync_directory(path.parent)
