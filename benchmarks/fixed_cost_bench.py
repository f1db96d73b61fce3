"""A run's fixed cost: `society run examples/hello.py` end to end, with the artifact root's
Temporal dev server left warm between runs (the default) beside the same run with a dev server
started and stopped for each (``SOCIETY_TEMPORAL_IDLE_S=0``), interleaved round by round.

    .venv/bin/python benchmarks/fixed_cost_bench.py [--rounds 5] [--module examples/hello.py]

Prints each round's seconds for both sides, their medians, the ratio, and the program's own
span (the ledger's first to last record) for scale. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def run_once(module: Path, artifacts: Path, idle_s: str) -> tuple[float, float]:
    """Wall seconds of one `society run`, and its ledger's span in seconds."""
    env = {**os.environ, "SOCIETY_TEMPORAL_IDLE_S": idle_s}
    env.pop("TEMPORAL_ADDRESS", None)
    started = time.monotonic()
    done = subprocess.run(
        [*SOCIETY, "run", str(module), "--artifacts", str(artifacts)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"society run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    line = json.loads(done.stdout)
    records = Path(line["ledger"]) / "records.ndjson"
    nanos = [json.loads(text)["elapsedNanos"] for text in records.read_text().splitlines()]
    return wall, (max(nanos) - min(nanos)) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--module", type=Path, default=ROOT / "examples" / "hello.py")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fixed-cost-") as scratch:
        warm_root, cold_root = Path(scratch, "warm"), Path(scratch, "cold")
        run_once(args.module, warm_root, "600")  # the warm side's server starts once, here
        warm, cold, spans = [], [], []
        for number in range(1, args.rounds + 1):
            cold_s, span = run_once(args.module, cold_root, "0")
            warm_s, _ = run_once(args.module, warm_root, "600")
            cold.append(cold_s)
            warm.append(warm_s)
            spans.append(span)
            print(f"round {number}: warm server {warm_s:.2f} s, a server per run {cold_s:.2f} s")
        subprocess.run(
            [*SOCIETY, "temporal", "stop", "--artifacts", str(warm_root)],
            capture_output=True,
            check=False,
        )
    warm_m, cold_m = statistics.median(warm), statistics.median(cold)
    print(
        f"median: warm server {warm_m:.2f} s, a server per run {cold_m:.2f} s, "
        f"ratio {warm_m / cold_m:.2f}x; the ledger's span {statistics.median(spans):.2f} s"
    )


if __name__ == "__main__":
    main()
