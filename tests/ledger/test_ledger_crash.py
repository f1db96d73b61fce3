"""Crash durability: SIGKILL a writer at random points; every returned append survives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ledger_testkit import Counted, catalog

from ledger import LedgerCheckpoint, open_ledger_artifacts

CHILD = Path(__file__).with_name("crash_child.py")
ROUNDS = int(os.environ.get("LEDGER_CRASH_ROUNDS", "24"))
CHECKPOINT_EVERY = 25


def _kill_a_writer(directory: Path, appenders: int, delay: float) -> dict[int, int]:
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


@pytest.mark.slow
def test_every_returned_append_survives_sigkill_at_random_points(tmp_path: Path) -> None:
    seed = int(os.environ.get("LEDGER_CRASH_SEED", time.time_ns() % 2**32))
    rng = random.Random(seed)
    stops: dict[str, int] = {}
    signed_rounds = 0
    for round_number in range(ROUNDS):
        appenders = rng.choice([1, 8, 64])
        delay = rng.uniform(0.0, 0.4)
        where = f"seed {seed}, round {round_number}, {appenders} appenders, kill +{delay:.3f}s"
        directory = tmp_path / f"ledger-{round_number}"
        reports = _kill_a_writer(directory, appenders, delay)

        view = open_ledger_artifacts(catalog, directory, allow_incomplete=True)
        assert not view.complete and view.stop is not None, where
        stops[view.stop.reason] = stops.get(view.stop.reason, 0) + 1
        assert max(reports) < len(view), f"{where}: a returned append is missing"
        for sequence, n in reports.items():
            event = view[sequence].event
            assert isinstance(event, Counted) and event.n == n, where
        assert view.stop.byte_offset <= (directory / "records.ndjson").stat().st_size
        if len(view) > CHECKPOINT_EVERY:
            assert view.last_checkpoint is not None, where
        if view.last_checkpoint is not None:
            signed_rounds += 1
            checkpoint = view[view.last_checkpoint].event
            assert isinstance(checkpoint, LedgerCheckpoint), where
            assert checkpoint.record_count == view.last_checkpoint, where
            later = view.records[view.last_checkpoint + 1 :]
            assert not any(isinstance(r.event, LedgerCheckpoint) for r in later), where
    print(f"crash rounds {ROUNDS} (seed {seed}): stops {stops}, {signed_rounds} with a checkpoint")
    assert signed_rounds > 0
