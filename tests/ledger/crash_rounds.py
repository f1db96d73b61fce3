"""One crash round: SIGKILL a writer (``crash_child.py``) at a random point, then judge its ledger.

Shared by the crash test (a short run in CI) and ``benchmarks/ledger_crash_soak.py`` (many
rounds); both count the same things.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ledger_testkit import Counted, catalog

from ledger import LedgerCheckpoint, LedgerVerificationError, open_ledger_artifacts

CHILD = Path(__file__).with_name("crash_child.py")
CHECKPOINT_EVERY = 25


def kill_a_writer(directory: Path, appenders: int, delay: float) -> dict[int, int]:
    """Run the child until ``delay`` after its first durable append, SIGKILL it, return its
    reports: sequence -> n for every append that returned before the kill."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHILD.parent), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(appenders), str(CHECKPOINT_EVERY)],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    try:
        first = child.stdout.readline()  # blocks until an append has returned
        assert first, "the child died before its first append"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    reports: dict[int, int] = {}
    for line in (first + rest).decode().splitlines():
        sequence, n = line.split()
        reports[int(sequence)] = int(n)
    return reports


@dataclass
class CrashRound:
    """What one killed writer left: judged against what it had acknowledged."""

    acknowledged: int
    durable: int
    """Records in the verified prefix (0 when it did not verify)."""
    lost: list[int]
    """Acknowledged sequences missing from the prefix or holding another event."""
    verified: bool
    stop_reason: str | None
    checkpoint_problems: list[str]
    """Empty when the last checkpoint counts its prefix and no checkpoint follows it."""
    signed: bool
    """Whether the prefix ends under a signed checkpoint."""
    error: str | None = None


def judge(directory: Path, reports: dict[int, int]) -> CrashRound:
    """Verify the killed writer's ledger as an incomplete view and compare it with ``reports``."""
    try:
        view = open_ledger_artifacts(catalog, directory, allow_incomplete=True)
    except LedgerVerificationError as exc:
        return CrashRound(len(reports), 0, sorted(reports), False, None, [], False, str(exc))
    lost = []
    for sequence, n in sorted(reports.items()):
        event = view[sequence].event if sequence < len(view) else None
        if not (isinstance(event, Counted) and event.n == n):
            lost.append(sequence)
    problems = []
    if view.complete or view.stop is None:
        problems.append("a killed writer's ledger reads as complete")
    elif view.stop.byte_offset > (directory / "records.ndjson").stat().st_size:
        problems.append("the stop lies past the end of the file")
    if len(view) > CHECKPOINT_EVERY and view.last_checkpoint is None:
        problems.append(f"{len(view)} records and no checkpoint")
    if view.last_checkpoint is not None:
        checkpoint = view[view.last_checkpoint].event
        if not (
            isinstance(checkpoint, LedgerCheckpoint)
            and checkpoint.record_count == view.last_checkpoint
        ):
            problems.append("the last checkpoint does not count the records before it")
        later = view.records[view.last_checkpoint + 1 :]
        if any(isinstance(r.event, LedgerCheckpoint) for r in later):
            problems.append("a checkpoint follows the last checkpoint")
    return CrashRound(
        acknowledged=len(reports),
        durable=len(view),
        lost=lost,
        verified=True,
        stop_reason=view.stop.reason if view.stop is not None else None,
        checkpoint_problems=problems,
        signed=view.last_checkpoint is not None,
    )
