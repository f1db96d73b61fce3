"""Crash soak: SIGKILL the ledger writer at random points, many times; count what survives.

Each round starts a writer process (tests/ledger/crash_child.py: 1, 8 or 64 concurrent
appenders, a checkpoint every 25 records), kills it at a random moment in its first 0.4 s of
appending, verifies what it left as an incomplete ledger and compares it with every append the
writer had acknowledged before the kill (tests/ledger/crash_rounds.py, shared with the CI test,
which runs 24 rounds). Prints the acknowledged records lost (must be 0) and how many prefixes
verify. Not a test.

    .venv/bin/python benchmarks/ledger_crash_soak.py --rounds 200 [--seed N]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ledger"))

from crash_rounds import judge, kill_a_writer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=time.time_ns() % 2**32)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    acknowledged = lost = verified = signed = 0
    stops: Counter[str] = Counter()
    problems: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="crash-soak-") as scratch:
        for round_number in range(args.rounds):
            appenders = rng.choice([1, 8, 64])
            delay = rng.uniform(0.0, 0.4)
            directory = Path(scratch) / f"ledger-{round_number}"
            outcome = judge(directory, kill_a_writer(directory, appenders, delay))
            acknowledged += outcome.acknowledged
            lost += len(outcome.lost)
            verified += outcome.verified
            signed += outcome.signed
            stops[outcome.stop_reason or "did-not-verify"] += 1
            where = f"round {round_number} ({appenders} appenders, kill +{delay:.3f}s)"
            if outcome.error or outcome.lost or outcome.checkpoint_problems:
                problems.append(
                    f"{where}: {outcome.error or ''} lost {outcome.lost[:10]} "
                    f"{outcome.checkpoint_problems}"
                )
                print(problems[-1], file=sys.stderr)
            if (round_number + 1) % 20 == 0:
                print(f"  {round_number + 1} rounds, {lost} lost", file=sys.stderr)
            # each round's ledger is judged; the next round needs only its own directory
            for path in directory.iterdir():
                path.unlink()
            directory.rmdir()
    print(
        f"crash soak: {args.rounds} SIGKILL rounds (seed {args.seed}) in "
        f"{time.monotonic() - started:.0f} s; acknowledged records {acknowledged}, "
        f"lost {lost}; prefixes verified {verified}/{args.rounds}, "
        f"{signed} ending under a signed checkpoint; stops {dict(stops)}; "
        f"other problems {len(problems)}"
    )
    sys.exit(1 if lost or problems or verified != args.rounds else 0)


if __name__ == "__main__":
    main()
