"""The ledger's sync process: a writer's records are durable only once that process says so.

Each test plays what can happen to the process that writes and fsyncs records.ndjson: it is
stopped, killed, refused by the disk, or outlived by nothing when its writer is killed.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from ledger_testkit import Counted, catalog, open_test_writer

from ledger import (
    LedgerWriteError,
    Record,
    open_ledger_artifacts,
)
from ledger.writer import AppendOutcome

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).with_name("sync_child.py")


def _child(directory: Path, mode: str, **popen: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHILD.parent), *sys.path])}
    return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
        [sys.executable, str(CHILD), str(directory), mode],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        **popen,
    )


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # exited, not yet reaped by its new parent


async def test_the_sync_process_is_a_process_of_its_own(tmp_path: Path) -> None:
    async with open_test_writer(tmp_path / "l") as writer:
        pid = writer.sync_process_pid
        assert pid is not None and pid != os.getpid()
        await writer.append(Counted(n=0), producer="p")
        await writer.complete()
    assert _gone(pid)  # complete() ended it


async def test_nothing_settles_before_the_sync_process_reports_it_durable(
    tmp_path: Path,
) -> None:
    async with open_test_writer(tmp_path / "l") as writer:
        await writer.append(Counted(n=0), producer="p")
        before = writer.receipt().record_count
        pid = writer.sync_process_pid
        assert pid is not None
        settled: list[AppendOutcome] = []
        os.kill(pid, signal.SIGSTOP)
        try:
            writer.append_soon(Counted(n=1), producer="p", then=settled.append)
            await anyio.sleep(0.3)  # sent to the sync process, which cannot write or fsync it
            assert settled == []
            assert writer.receipt().record_count == before  # followers do not see it either
        finally:
            os.kill(pid, signal.SIGCONT)
        await writer.flushed()
        assert len(settled) == 1 and isinstance(settled[0], Record)
        await writer.complete()
    assert [e.n for e in open_ledger_artifacts(catalog, tmp_path / "l").events(Counted)] == [0, 1]


async def test_a_killed_sync_process_latches_the_writer_failed_and_keeps_its_prefix(
    tmp_path: Path,
) -> None:
    async with open_test_writer(tmp_path / "l") as writer:
        for n in range(3):
            await writer.append(Counted(n=n), producer="p")
        pid = writer.sync_process_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(LedgerWriteError) as caught:
            for n in range(3, 1000):
                await writer.append(Counted(n=n), producer="p")
                await anyio.sleep(0.01)
        assert caught.value.reason == "write-failed"
        assert "sync process ended" in caught.value.detail
        assert "signal 9" in caught.value.detail
        with pytest.raises(LedgerWriteError):
            await writer.complete()
    view = open_ledger_artifacts(catalog, tmp_path / "l", allow_incomplete=True)
    assert [e.n for e in view.events(Counted)][:3] == [0, 1, 2]
    assert view.stop is not None and view.stop.reason == "no-completion"


def test_a_write_the_disk_refuses_fails_the_writer_with_the_kernels_error(tmp_path: Path) -> None:
    # RLIMIT_FSIZE: the kernel refuses a write past it with EFBIG (Python ignores SIGXFSZ), and
    # the sync process inherits it from its writer, so its real write fails, not a substitute's.
    limit = 64 * 1024

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    child = _child(tmp_path / "l", "fill", preexec_fn=limited)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out
    result = json.loads(out)
    assert result["reason"] == "write-failed"
    assert "File too large" in result["detail"], result["detail"]
    assert result["returned"] > 100  # the records under the limit were written and returned
    view = open_ledger_artifacts(catalog, tmp_path / "l", allow_incomplete=True)
    appended = [e.n for e in view.events(Counted)]
    assert appended[: result["returned"]] == list(range(result["returned"]))
    assert (tmp_path / "l" / "records.ndjson").stat().st_size <= limit


def test_the_sync_process_dies_with_its_writer(tmp_path: Path) -> None:
    child = _child(tmp_path / "l", "linger")
    try:
        assert child.stdout is not None
        pid = int(child.stdout.readline())
        assert not _gone(pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid), f"the sync process {pid} outlived its writer"
    finally:
        child.kill()
        child.wait()
    view = open_ledger_artifacts(catalog, tmp_path / "l", allow_incomplete=True)
    assert view.stop is not None  # a killed writer's prefix, which verifies
