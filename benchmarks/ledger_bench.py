"""Ledger throughput next to same-run baselines: durable group-commit appends and verification.

    .venv/bin/python benchmarks/ledger_bench.py [--seconds 3] [--dir /path/on/the/disk/to/test]

For 200-byte events it prints, per number of concurrent appenders, the writer's durable
records/s, a baseline that encodes the same records the same way (event wire object, canonical
JSON, SHA-256 chain) and writes them with one fsync per batch of the writer's own average batch
size, with no concurrency machinery; then verification records/s next to two baselines over the
same file: SHA-256 + json.loads (the old baseline, printed for comparison), and SHA-256 + json.loads
+ canonical re-encode + byte compare, the least any verifier must do that enforces the ledger's
rule that a line is the one canonical spelling of its value (two parsers must never read two
values from one signed line). Targets: append at 64 appenders >= 0.5x baseline, verify >= 0.5x
the canonical baseline (the target is unchanged; the baseline now does the same checks).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio

from ledger import Event, EventCatalog, Provenance, open_ledger_writer
from ledger.canonical import canonical_json, sha256_hex
from ledger.format import MANIFEST, RECORDS, utc_now
from ledger.verification import verify_ledger

APPEND_TARGET = 0.5
VERIFY_TARGET = 0.5
AMBITION = 50_000


class BenchSaid(Event):
    tag: ClassVar[str] = "bench.said/v1"

    speaker: str
    turn: int
    text: str


catalog = EventCatalog.make(BenchSaid)


def make_event(turn: int) -> BenchSaid:
    """An event whose wire object is 200 bytes of canonical JSON."""
    probe = BenchSaid(speaker="agent-07", turn=turn, text="")
    room = 200 - len(canonical_json(probe.to_wire()))
    return BenchSaid(speaker="agent-07", turn=turn, text="x" * room)


async def writer_run(directory: Path, appenders: int, seconds: float) -> tuple[int, float, float]:
    """Append from ``appenders`` tasks for about ``seconds``; (records, elapsed, mean batch)."""
    counts = [0] * appenders
    events = [make_event(turn) for turn in range(256)]
    async with open_ledger_writer(
        directory,
        catalog=catalog,
        definition_id="bench",
        run_id="sr-" + "0" * 32,
        provenance=Provenance.current("bench"),
    ) as writer:
        fsyncs_before = writer.sync_count
        deadline = time.perf_counter() + seconds

        async def appender(slot: int) -> None:
            n = 0
            producer = f"agent-{slot:02d}"
            while time.perf_counter() < deadline:
                await writer.append(events[n & 255], producer=producer)
                n += 1
            counts[slot] = n

        started = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            for slot in range(appenders):
                tasks.start_soon(functools.partial(appender, slot))
        elapsed = time.perf_counter() - started
        batches = max(writer.sync_count - fsyncs_before, 1)
        await writer.complete()
    total = sum(counts)
    return total, elapsed, total / batches


def baseline_run(directory: Path, records: int, batch: int) -> float:
    """The same records, encoded the same way, written by a plain loop; returns elapsed seconds."""
    directory.mkdir()
    manifest = canonical_json({"bench": True})
    (directory / MANIFEST).write_bytes(manifest)
    events = [make_event(turn) for turn in range(256)]
    run_id = "sr-" + "0" * 32
    head = sha256_hex(manifest)
    started_ns = time.monotonic_ns()
    fd = os.open(directory / RECORDS, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    started = time.perf_counter()
    try:
        sequence = 0
        while sequence < records:
            lines = []
            for _ in range(min(batch, records - sequence)):
                body = canonical_json(
                    {
                        "runId": run_id,
                        "eventId": f"{run_id}:{sequence}",
                        "logicalSequence": sequence,
                        "elapsedNanos": time.monotonic_ns() - started_ns,
                        "observedAt": utc_now(),
                        "producer": "agent-00",
                        "prevDigest": head,
                        "event": events[sequence & 255].to_wire(),
                    }
                )
                head = sha256_hex(body)
                lines.append(body + b"\n")
                sequence += 1
            os.write(fd, b"".join(lines))
            os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - started


def _canonical_baseline(data: bytes) -> None:
    """SHA-256, parse, re-encode canonically and compare: what any rule-enforcing verifier does."""
    for line in data.splitlines():
        hashlib.sha256(line).hexdigest()
        value = json.loads(line)
        encoded = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
        if encoded != line:
            raise AssertionError("the canonical baseline found a non-canonical line")


def _parse_baseline(data: bytes) -> None:
    parsed: list[Any] = []
    for line in data.splitlines():
        hashlib.sha256(line).hexdigest()
        parsed.append(json.loads(line))


def verify_rates(directory: Path, repeat: int) -> tuple[float, float, float, int]:
    """Best-of-``repeat`` records/s for ``verify_ledger``, for SHA-256 + json.loads, and for
    SHA-256 + json.loads + canonical re-encode (alternating, on the same file)."""
    count = 0
    best_verify = best_parse = best_canonical = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        verified = verify_ledger(catalog, directory)
        best_verify = min(best_verify, time.perf_counter() - started)
        count = len(verified.envelopes)
        data = (directory / RECORDS).read_bytes()
        started = time.perf_counter()
        _parse_baseline(data)
        best_parse = min(best_parse, time.perf_counter() - started)
        started = time.perf_counter()
        _canonical_baseline(data)
        best_canonical = min(best_canonical, time.perf_counter() - started)
    return count / best_verify, count / best_parse, count / best_canonical, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per run (default 2)")
    parser.add_argument(
        "--repeat", type=int, default=2, help="alternating runs per level; best counts (2)"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir)"
    )
    parser.add_argument("--appenders", type=int, nargs="+", default=[1, 8, 64])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ledger-bench-", dir=args.dir))
    print(
        f"ledger bench: 200-byte events, best of {args.repeat} alternating runs of "
        f"{args.seconds:g} s per level, files under {root}"
    )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    print()
    print(
        f"{'appenders':>9}  {'writer rec/s':>12}  {'mean batch':>10}  {'baseline rec/s':>14}  "
        f"{'ratio':>6}"
    )
    ok = True
    verify_dir: Path | None = None
    try:
        for appenders in args.appenders:
            written = base = 0.0
            batch = 1.0
            for attempt in range(args.repeat):
                ledger_dir = root / f"writer-{appenders}-{attempt}"
                total, elapsed, batch = anyio.run(writer_run, ledger_dir, appenders, args.seconds)
                written = max(written, total / elapsed)
                baseline_dir = root / f"baseline-{appenders}-{attempt}"
                base_elapsed = baseline_run(baseline_dir, total, max(round(batch), 1))
                base = max(base, total / base_elapsed)
            ratio = written / base
            mark = ""
            if appenders == 64:
                mark = "  ok" if ratio >= APPEND_TARGET else f"  BELOW {APPEND_TARGET}x target"
                ok &= ratio >= APPEND_TARGET
            print(
                f"{appenders:>9}  {written:>12,.0f}  {batch:>10.1f}  {base:>14,.0f}  "
                f"{ratio:>5.2f}x{mark}"
            )
            verify_dir = ledger_dir
        assert verify_dir is not None
        verify, parse, canonical, count = verify_rates(verify_dir, repeat=3)
        ratio = verify / canonical
        ok &= ratio >= VERIFY_TARGET
        print()
        print(f"verify ({count:,} records)  {verify:,.0f} rec/s")
        print(
            f"  baseline sha256+json.loads+canonical re-encode  {canonical:,.0f} rec/s   "
            f"ratio {ratio:.2f}x"
            f"{'  ok' if ratio >= VERIFY_TARGET else f'  BELOW {VERIFY_TARGET}x target'}"
        )
        print(
            f"  baseline sha256+json.loads (no canonical check)  {parse:,.0f} rec/s   "
            f"ratio {verify / parse:.2f}x  (for comparison; a verifier this cheap accepts two "
            f"spellings of one value)"
        )
        print(f"(ambition: {AMBITION:,} durable appends/s at 64 appenders; fsync time bounds it)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
