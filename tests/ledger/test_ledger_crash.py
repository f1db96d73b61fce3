"""Crash durability: SIGKILL a writer at random points; every returned append survives."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from crash_rounds import judge, kill_a_writer

ROUNDS = int(os.environ.get("LEDGER_CRASH_ROUNDS", "24"))


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
        outcome = judge(directory, kill_a_writer(directory, appenders, delay))
        assert outcome.verified, f"{where}: {outcome.error}"
        assert outcome.lost == [], f"{where}: returned appends missing: {outcome.lost}"
        assert outcome.checkpoint_problems == [], where
        assert outcome.stop_reason is not None
        stops[outcome.stop_reason] = stops.get(outcome.stop_reason, 0) + 1
        signed_rounds += outcome.signed
    print(f"crash rounds {ROUNDS} (seed {seed}): stops {stops}, {signed_rounds} with a checkpoint")
    assert signed_rounds > 0
