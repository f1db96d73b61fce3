"""The writer: exclusive create, group commit, idempotent completion, latched failure, followers."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from ledger_testkit import (
    PROVENANCE,
    RUN_ID,
    Counted,
    Said,
    Unused,
    catalog,
    open_test_writer,
    sample_events,
    write_ledger_async,
)

from ledger import (
    CatalogError,
    DurableFiles,
    Event,
    EventCatalog,
    LedgerCompletionConflict,
    LedgerEncodingError,
    LedgerError,
    LedgerExistsError,
    LedgerWriteError,
    LedgerWriter,
    Record,
    open_ledger_artifacts,
    open_ledger_writer,
)
from ledger.canonical import MAX_NESTING
from ledger.format import COMPLETION, RECORDS
from ledger.writer import AppendOutcome

pytestmark = pytest.mark.anyio


async def test_a_ledger_is_never_overwritten(tmp_path: Path) -> None:
    await write_ledger_async(tmp_path / "l", sample_events(1))
    before = (tmp_path / "l" / RECORDS).read_bytes()
    with pytest.raises(LedgerExistsError) as caught:
        async with open_test_writer(tmp_path / "l"):
            pass
    assert caught.value.reason == "ledger-exists"
    assert (tmp_path / "l" / RECORDS).read_bytes() == before
    (tmp_path / "empty").mkdir()
    with pytest.raises(LedgerExistsError):
        async with open_test_writer(tmp_path / "empty"):
            pass


async def test_concurrent_appends_commit_in_groups_and_return_their_records(
    tmp_path: Path,
) -> None:
    returned: list[Record] = []
    async with open_test_writer(tmp_path / "l") as writer:

        async def speak(i: int) -> None:
            returned.append(await writer.append(Said(speaker="a", text=str(i)), producer=f"p{i}"))

        async with anyio.create_task_group() as tasks:
            for i in range(50):
                tasks.start_soon(speak, i)
        assert writer.record_count == 50
        assert writer.receipt().record_count == 50 and not writer.receipt().complete
        receipt = await writer.complete()
    assert sorted(r.sequence for r in returned) == list(range(50))
    assert receipt.complete and receipt.record_count == 51  # and the final checkpoint
    ledger = open_ledger_artifacts(catalog, tmp_path / "l")
    assert {r.event_id: r.producer for r in ledger.records[:50]} == {
        r.event_id: r.producer for r in returned
    }
    assert returned[0].envelope == ledger[returned[0].sequence].envelope


async def test_an_undeclared_event_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    async with open_test_writer(tmp_path / "l") as writer:
        with pytest.raises(CatalogError) as caught:
            await writer.append(Unused(flag=True), producer="p")
        assert caught.value.reason == "undeclared-event"
        assert writer.record_count == 0
        await writer.append(Counted(n=1), producer="p")
        await writer.complete()
    assert len(open_ledger_artifacts(catalog, tmp_path / "l")) == 2


async def test_completion_is_idempotent(tmp_path: Path) -> None:
    async with open_test_writer(tmp_path / "l") as writer:
        await writer.append(Counted(n=1), producer="p")
        first, second = await writer.complete(), await writer.complete()
        completion = (tmp_path / "l" / COMPLETION).read_bytes()
        third = await writer.complete()
    assert first == second == third == writer.receipt()
    assert (tmp_path / "l" / COMPLETION).read_bytes() == completion


async def test_concurrent_completions_agree(tmp_path: Path) -> None:
    receipts = []
    async with open_test_writer(tmp_path / "l") as writer:
        await writer.append(Counted(n=1), producer="p")

        async def finish() -> None:
            receipts.append(await writer.complete())

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(finish)
    assert len(receipts) == 3 and receipts[0] == receipts[1] == receipts[2]
    assert receipts[0].record_count == 2


async def test_a_different_completion_on_disk_is_a_conflict(tmp_path: Path) -> None:
    async with open_test_writer(tmp_path / "l") as writer:
        await writer.append(Counted(n=1), producer="p")
        await writer.complete()
        (tmp_path / "l" / COMPLETION).write_bytes(b'{"someone":"else"}')
        with pytest.raises(LedgerCompletionConflict) as caught:
            await writer.complete()
    assert caught.value.reason == "completion-conflict"
    assert (tmp_path / "l" / COMPLETION).read_bytes() == b'{"someone":"else"}'  # left as is


async def test_nothing_is_appended_after_completion(tmp_path: Path) -> None:
    async with open_test_writer(tmp_path / "l") as writer:
        await writer.complete()
        with pytest.raises(LedgerError) as caught:
            await writer.append(Counted(n=1), producer="p")
    assert caught.value.reason == "ledger-closed"


class FailingFiles(DurableFiles):
    """Real files, except that writes to records.ndjson fail once ``broken`` is set."""

    def __init__(self) -> None:
        self.broken = False
        self.records_fd = -1

    def create(self, path: Path) -> int:
        fd = super().create(path)
        if path.name == RECORDS:
            self.records_fd = fd
        return fd

    def write(self, fd: int, data: bytes) -> None:
        if self.broken and fd == self.records_fd:
            raise OSError(28, "No space left on device")
        super().write(fd, data)


async def test_a_write_error_latches_the_writer_failed(tmp_path: Path) -> None:
    files = FailingFiles()
    seen: list[int] = []
    async with open_test_writer(tmp_path / "l", files=files) as writer:

        async def follow() -> None:
            async for record in writer.records():
                seen.append(record.sequence)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follow)
            for i in range(3):
                await writer.append(Counted(n=i), producer="p")
            files.broken = True
            with pytest.raises(LedgerWriteError) as caught:
                await writer.append(Counted(n=3), producer="p")
            assert caught.value.reason == "write-failed"
            assert "No space left" in caught.value.detail
            files.broken = False  # the disk recovers; the writer stays failed
            with pytest.raises(LedgerWriteError):
                await writer.append(Counted(n=4), producer="p")
            with pytest.raises(LedgerWriteError):
                await writer.complete()
            assert writer.failed is caught.value
    assert seen == [0, 1, 2]  # the follower ended with the durable prefix
    view = open_ledger_artifacts(catalog, tmp_path / "l", allow_incomplete=True)
    assert [r.sequence for r in view] == [0, 1, 2]
    assert view.stop is not None and view.stop.reason == "no-completion"


async def test_every_append_waiting_in_a_failed_batch_fails(tmp_path: Path) -> None:
    files = FailingFiles()
    files.broken = True
    outcomes: list[BaseException] = []
    async with open_test_writer(tmp_path / "l", files=files) as writer:

        async def append(i: int) -> None:
            try:
                await writer.append(Counted(n=i), producer="p")
            except LedgerWriteError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tasks:
            for i in range(20):
                tasks.start_soon(append, i)
    assert len(outcomes) == 20 and all(o is outcomes[0] for o in outcomes)


async def _collect(writer: LedgerWriter, into: list[int], *, said_only: bool = False) -> None:
    if said_only:
        async for event in writer.events(Said):
            into.append(int(event.text))
    else:
        async for record in writer.records():
            into.append(record.sequence)


async def test_concurrent_followers_see_every_record_in_order_and_end_at_completion(
    tmp_path: Path,
) -> None:
    early: list[list[int]] = [[] for _ in range(3)]
    late: list[list[int]] = [[] for _ in range(2)]
    said: list[int] = []
    async with open_test_writer(tmp_path / "l") as writer:
        async with anyio.create_task_group() as readers:
            for into in early:
                readers.start_soon(_collect, writer, into)
            readers.start_soon(functools.partial(_collect, writer, said, said_only=True))

            async def appender(slot: int) -> None:
                for i in range(slot, 200, 8):
                    event = Said(speaker="s", text=str(i)) if i % 2 else Counted(n=i)
                    await writer.append(event, producer=f"p{slot}")

            async with anyio.create_task_group() as appenders:
                for slot in range(8):
                    appenders.start_soon(appender, slot)
                await anyio.sleep(0.01)
                for into in late:  # join while appends are in flight: catch up, then follow
                    readers.start_soon(_collect, writer, into)
            await writer.complete()
    total = writer.record_count
    assert total == 201
    for seen in [*early, *late]:
        assert seen == list(range(total))
    assert sorted(said) == [i for i in range(200) if i % 2]


async def test_shielded_finalization_still_commits_after_an_outer_scope_is_cancelled(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "ledger"
    finalized: list[int] = []
    with anyio.CancelScope() as outer:
        async with open_test_writer(directory) as writer:
            await writer.append(Counted(n=0), producer="tester")
            outer.cancel()
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True), anyio.fail_after(10):
                    record = await writer.append(Counted(n=1), producer="finalizer")
                    finalized.append(record.sequence)
                    await writer.complete()
    assert finalized == [1]
    assert (directory / COMPLETION).exists()


class Carried(Event):
    tag: ClassVar[str] = "test.carried/v1"

    payload: Any


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "bad",
    [
        Said(speaker="mallory", text="lone \ud800 surrogate"),
        Carried(payload=_deep(MAX_NESTING)),
        Carried(payload=10**5000),
        Carried(payload=float("nan")),
    ],
    ids=["lone-surrogate", "too-deep", "integer-too-long", "nan"],
)
async def test_an_event_the_format_cannot_carry_fails_typed_and_the_writer_goes_on(
    tmp_path: Path, bad: Event
) -> None:
    directory = tmp_path / "l"
    async with open_ledger_writer(
        directory,
        catalog=EventCatalog.make(Said, Counted, Carried),
        definition_id="test.definition",
        run_id=RUN_ID,
        provenance=PROVENANCE,
    ) as writer:
        results: list[Record | BaseException] = []

        async def append(event: Event) -> None:
            try:
                results.append(await writer.append(event, producer="tester"))
            except LedgerError as exc:
                results.append(exc)

        async with anyio.create_task_group() as tasks:  # one batch: before, bad, after
            for event in (Counted(n=1), bad, Counted(n=2)):
                tasks.start_soon(append, event)
        await writer.append(Counted(n=3), producer="tester")
        await writer.complete()
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1 and isinstance(failures[0], LedgerEncodingError)
    assert failures[0].reason == "event-unencodable"
    ledger = open_ledger_artifacts(EventCatalog.make(Said, Counted, Carried), directory)
    assert [event.n for event in ledger.events(Counted)] == [1, 2, 3]
    assert ledger.signature == "self" and ledger.unsigned_records == 0


class HeldFiles(DurableFiles):
    """Real files, except that fsyncs of records.ndjson wait until ``release`` is set."""

    def __init__(self) -> None:
        self.holding = False
        self.release = threading.Event()
        self.records_fds: set[int] = set()

    def create(self, path: Path) -> int:
        fd = super().create(path)
        if path.name == RECORDS:
            self.records_fds.add(fd)
        return fd

    def fsync(self, fd: int) -> None:
        if self.holding and fd in self.records_fds:
            self.release.wait(10)
        super().fsync(fd)


async def test_a_batch_with_nothing_to_write_does_not_vouch_for_the_commit_before_it(
    tmp_path: Path,
) -> None:
    files = HeldFiles()
    async with open_ledger_writer(
        tmp_path / "l",
        catalog=EventCatalog.make(Said, Counted),
        definition_id="test.definition",
        run_id=RUN_ID,
        provenance=PROVENANCE,
        files=files,
    ) as writer:
        files.holding = True
        settled: list[str] = []
        writer.append_soon(Counted(n=1), producer="p", then=lambda _: settled.append("first"))
        await anyio.sleep(0.2)  # its commit is in flight, its fsync held
        refused: list[AppendOutcome] = []
        writer.append_soon(
            Said(speaker="mallory", text="lone \ud800 surrogate"),
            producer="p",
            then=refused.append,
        )
        await anyio.sleep(0.2)  # the refused one is its own batch, with no bytes to write
        assert settled == []  # not durable yet: its fsync has not returned
        assert refused == []  # and nothing settles before it, in record order
        files.release.set()
        await writer.flushed()
        assert settled == ["first"]
        assert len(refused) == 1 and isinstance(refused[0], LedgerEncodingError)
        await writer.complete()
