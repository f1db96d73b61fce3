"""Through the I/O seam: write, file fsync and directory fsync happen before a record is visible.

SIGKILL keeps the page cache, so the crash test cannot see a missing fsync; this one can. The
recording seam models what a power cut would keep: bytes up to the last fsync of a file whose
directory entry (and its directory's, up the new ones) was itself fsynced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from ledger_testkit import Counted, open_test_writer

from ledger import DurableFiles
from ledger.format import RECORDS

pytestmark = pytest.mark.anyio


class RecordingFiles(DurableFiles):
    """Delegates to the real operations and keeps what a power cut would leave."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.paths: dict[int, Path] = {}
        self.written: dict[Path, int] = {}
        self.synced: dict[Path, int] = {}
        self.unsynced_entries: set[Path] = set()  # created, parent directory not fsynced since

    def make_directory(self, path: Path) -> None:
        self.unsynced_entries.add(path)
        self.calls.append(("mkdir", path.name))
        super().make_directory(path)

    def create(self, path: Path) -> int:
        fd = super().create(path)
        self.paths[fd] = path
        self.written[path] = self.synced[path] = 0
        self.unsynced_entries.add(path)
        self.calls.append(("create", path.name))
        return fd

    def write(self, fd: int, data: bytes) -> None:
        super().write(fd, data)
        self.written[self.paths[fd]] += len(data)
        self.calls.append(("write", self.paths[fd].name))

    def fsync(self, fd: int) -> None:
        # An fsync keeps what was written before it began (another commit may write meanwhile).
        path = self.paths[fd]
        covered = self.written[path]
        self.calls.append(("fsync", path.name))
        super().fsync(fd)
        self.synced[path] = max(self.synced[path], covered)

    def fsync_directory(self, path: Path) -> None:
        super().fsync_directory(path)
        self.unsynced_entries = {p for p in self.unsynced_entries if p.parent != path}
        self.calls.append(("fsync-dir", path.name))

    def survives_power_cut(self, path: Path) -> int:
        """Bytes of ``path`` a power cut would keep: 0 unless every new entry to it is synced."""
        if any(entry == path or entry in path.parents for entry in self.unsynced_entries):
            return 0
        return self.synced.get(path, 0)


class SkipsFileFsync(RecordingFiles):
    """A broken seam: fsync does nothing (what a writer that forgot it would leave)."""

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync-skipped", self.paths[fd].name))


class SkipsDirectoryFsync(RecordingFiles):
    def fsync_directory(self, path: Path) -> None:
        self.calls.append(("fsync-dir-skipped", path.name))


@dataclass
class Sightings:
    """For each record seen (by its appender or a reader): the bytes a power cut would keep."""

    returned: list[tuple[int, int]] = field(default_factory=list)
    read: list[tuple[int, int]] = field(default_factory=list)


async def _exercise(directory: Path, files: RecordingFiles) -> Sightings:
    sightings = Sightings()
    records = directory / RECORDS
    async with open_test_writer(directory, files=files) as writer:

        async def read() -> None:
            async for record in writer.records():
                sightings.read.append((record.sequence, files.survives_power_cut(records)))

        async def append(i: int) -> None:
            record = await writer.append(Counted(n=i), producer="p")
            sightings.returned.append((record.sequence, files.survives_power_cut(records)))

        async with anyio.create_task_group() as readers:
            readers.start_soon(read)
            async with anyio.create_task_group() as appenders:
                for i in range(40):
                    appenders.start_soon(append, i)
            await writer.complete()
    return sightings


def _assert_durable_when_seen(directory: Path, sightings: Sightings) -> None:
    lines = (directory / RECORDS).read_bytes().splitlines(keepends=True)
    ends = [sum(len(line) for line in lines[: i + 1]) for i in range(len(lines))]
    assert len(sightings.returned) == 40 and len(sightings.read) == 41
    for sequence, durable in sightings.returned + sightings.read:
        assert durable >= ends[sequence], f"record {sequence} was visible before it was durable"


async def test_a_record_is_durable_before_its_append_returns_or_a_reader_sees_it(
    tmp_path: Path,
) -> None:
    files = RecordingFiles()
    sightings = await _exercise(tmp_path / "ledger", files)
    _assert_durable_when_seen(tmp_path / "ledger", sightings)
    # The creation sequence, in order: each new entry is followed by its directory's fsync.
    setup = files.calls[: files.calls.index(("create", RECORDS)) + 3]
    assert setup == [
        ("mkdir", "ledger"),
        ("fsync-dir", tmp_path.name),
        ("create", "manifest.json"),
        ("write", "manifest.json"),
        ("fsync", "manifest.json"),
        ("fsync-dir", "ledger"),
        ("create", RECORDS),
        ("fsync", RECORDS),
        ("fsync-dir", "ledger"),
    ]
    writes = [i for i, call in enumerate(files.calls) if call == ("write", RECORDS)]
    for index in writes:  # each group commit is fsynced (maybe while the next one is written)
        assert ("fsync", RECORDS) in files.calls[index + 1 :]


@pytest.mark.parametrize("broken", [SkipsFileFsync, SkipsDirectoryFsync])
async def test_the_check_catches_a_missing_fsync(
    tmp_path: Path, broken: type[RecordingFiles]
) -> None:
    sightings = await _exercise(tmp_path / "ledger", broken())
    with pytest.raises(AssertionError, match="visible before it was durable"):
        _assert_durable_when_seen(tmp_path / "ledger", sightings)


async def test_completion_is_published_only_after_it_is_durable(tmp_path: Path) -> None:
    files = RecordingFiles()
    await _exercise(tmp_path / "ledger", files)
    temp = next(name for op, name in files.calls if op == "create" and name.endswith(".tmp"))
    tail = files.calls[files.calls.index(("create", temp)) :]
    assert tail == [
        ("create", temp),
        ("write", temp),
        ("fsync", temp),
        ("fsync-dir", "ledger"),  # after the link to completion.json (and the temp's unlink)
    ]
