"""The negotiator's addressed-proposal rule on hostile parts: the plain rule beside the linear one.

    .venv/bin/python benchmarks/policy_rule_bench.py [--sizes 4096 8192 16384 32768]

Each part is ``@alice `` repeated to the size, without the word: the worst case of the plain
rule ``@{me}\\b.*\\bpropos`` (every address retries ``.*`` to the end of the line), searched by
the plain rule and by ``ADDRESSED_PROPOSAL``, which the negotiator uses. Best of ``--rounds``.
Not a test.
"""

from __future__ import annotations

import argparse
import re
import time

from society_sandbox.runtimes.scripted import ADDRESSED_PROPOSAL

PLAIN = r"@{me}\b.*\bpropos"


def best_of(rounds: int, pattern: re.Pattern[str], text: str) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        assert pattern.search(text) is None
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    plain = re.compile(PLAIN.replace("{me}", "alice"))
    linear = re.compile(ADDRESSED_PROPOSAL.replace("{me}", "alice"))
    print(f"{'part bytes':>10} {'plain rule s':>13} {'linear rule s':>14} {'plain/linear':>13}")
    for size in args.sizes:
        text = ("@alice " * (size // 7 + 1))[:size]
        slow = best_of(args.rounds, plain, text)
        fast = best_of(args.rounds, linear, text)
        print(f"{size:>10} {slow:>13.4f} {fast:>14.6f} {slow / fast:>13.0f}")


if __name__ == "__main__":
    main()
