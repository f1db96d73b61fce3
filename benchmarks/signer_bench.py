"""What the ledger's signer process costs, next to signing in the writer's own process.

    .venv/bin/python benchmarks/signer_bench.py [--opens 10] [--signatures 2000]

Prints, each next to its same-run baseline and the ratio: opening and closing an empty ledger
whose key the signer process makes (baseline: the same ledger with a ``SigningKey`` object in
this process), and one checkpoint signature through the signer (baseline: ``SigningKey.sign``).
A writer signs once per checkpoint (every 1,000 records or 5 s) and once to complete.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import anyio

from ledger import EventCatalog, Provenance, SigningKey, open_ledger_writer
from ledger.signer import SignerProcess

RUN = "sr-" + "0" * 32


async def open_close(directory: Path, key: SigningKey | None) -> None:
    async with open_ledger_writer(
        directory,
        catalog=EventCatalog.make(),
        definition_id="bench.signer",
        run_id=RUN,
        provenance=Provenance(package_version="0", python_version="3", profile="bench"),
        signing_key=key,
    ) as writer:
        await writer.complete()


def per_open(opens: int, key: SigningKey | None) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        for i in range(opens):
            anyio.run(open_close, Path(scratch) / f"l{i}", key)
        return (time.perf_counter() - started) / opens


def checkpoint(count: int) -> bytes:
    statement = {"headDigest": "a" * 64, "recordCount": count, "runId": RUN}
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


def per_signature(signatures: int, signer: SigningKey | SignerProcess) -> float:
    data = [checkpoint(i) for i in range(signatures)]
    started = time.perf_counter()
    for statement in data:
        signer.sign(statement)
    return (time.perf_counter() - started) / signatures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opens", type=int, default=10)
    parser.add_argument("--signatures", type=int, default=2000)
    args = parser.parse_args()
    in_process = SigningKey.generate()
    baseline, measured = per_open(args.opens, in_process), per_open(args.opens, None)
    print(
        f"open+complete+close: baseline (key object) {baseline * 1000:.1f} ms, "
        f"signer process {measured * 1000:.1f} ms, ratio {measured / baseline:.2f}x"
    )
    process = SignerProcess.start(RUN)
    try:
        measured = per_signature(args.signatures, process)
    finally:
        process.close()
    baseline = per_signature(args.signatures, in_process)
    print(
        f"checkpoint signature: baseline (in process) {baseline * 1e6:.0f} us, "
        f"signer process {measured * 1e6:.0f} us, ratio {measured / baseline:.2f}x"
    )


if __name__ == "__main__":
    main()
