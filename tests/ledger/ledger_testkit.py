"""Test events, ledger builders and a forger that rewrites a ledger while holding a key."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, ClassVar

import anyio

from ledger import (
    DurableFiles,
    Event,
    EventCatalog,
    LedgerCheckpoint,
    LedgerWriter,
    Provenance,
    SigningKey,
    open_ledger_writer,
)
from ledger.canonical import canonical_json
from ledger.format import COMPLETION, MANIFEST, RECORDS


class Said(Event):
    tag: ClassVar[str] = "test.said/v1"

    speaker: str
    text: str


class Counted(Event):
    tag: ClassVar[str] = "test.counted/v1"

    n: int


class Unused(Event):
    tag: ClassVar[str] = "test.unused/v1"

    flag: bool


catalog = EventCatalog.make(Said, Counted)
RUN_ID = "sr-" + "1" * 32


PROVENANCE = Provenance(package_version="0", python_version="3", profile="test")


def open_test_writer(
    directory: Path,
    *,
    definition_id: str = "test.definition",
    files: DurableFiles | None = None,
    key_file: Path | None = None,
) -> AbstractAsyncContextManager[LedgerWriter]:
    """A writer of the test catalog for run ``RUN_ID`` (``files``: a seam of the test's own;
    ``key_file``: an operator key for its signer process)."""
    return open_ledger_writer(
        directory,
        catalog=catalog,
        definition_id=definition_id,
        run_id=RUN_ID,
        provenance=PROVENANCE,
        files=files,
        signing_key_file=key_file,
    )


def sample_events(count: int) -> list[Event]:
    return [
        Said(speaker=f"agent-{i % 3}", text=f"message {i}") if i % 2 else Counted(n=i)
        for i in range(count)
    ]


async def write_ledger_async(
    directory: Path,
    events: Sequence[Event],
    *,
    key: SigningKey | None = None,
    complete: bool = True,
    definition_id: str = "test.definition",
) -> None:
    async with open_ledger_writer(
        directory,
        catalog=catalog,
        definition_id=definition_id,
        run_id=RUN_ID,
        provenance=Provenance(package_version="0", python_version="3", profile="test"),
        metadata={"purpose": "test"},
        signing_key=key,
    ) as writer:
        for event in events:
            await writer.append(event, producer="tester")
        if complete:
            await writer.complete()


def write_ledger(
    directory: Path,
    count: int = 6,
    *,
    key: SigningKey | None = None,
    complete: bool = True,
) -> Path:
    """A small finished ledger: alternating Said/Counted events plus the final checkpoint."""
    anyio.run(
        lambda: write_ledger_async(directory, sample_events(count), key=key, complete=complete)
    )
    return directory


def record_lines(directory: Path) -> list[bytes]:
    return (directory / RECORDS).read_bytes().splitlines(keepends=True)


def write_record_lines(directory: Path, lines: Sequence[bytes]) -> None:
    (directory / RECORDS).write_bytes(b"".join(lines))


def forge(
    directory: Path,
    key: SigningKey,
    *,
    records: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    manifest: Callable[[dict[str, Any]], None] | None = None,
    completion: Callable[[dict[str, Any]], None] | None = None,
    resign_checkpoints: bool = True,
    set_public_key: bool = False,
    encode_line: Callable[[int, dict[str, Any]], bytes] | None = None,
    encode_file: Callable[[dict[str, Any]], bytes] | None = None,
    encode_completion: Callable[[dict[str, Any]], bytes] | None = None,
) -> None:
    """Rewrite the ledger as someone holding ``key`` could: apply the edits, then recompute every
    prevDigest, the completion digests and (unless told not to) checkpoint signatures, and sign.
    ``encode_line(index, row)``, ``encode_file(manifest)`` and ``encode_completion`` replace the
    canonical encoding of a line or file; digests and signatures cover the bytes they return."""
    manifest_obj = json.loads((directory / MANIFEST).read_bytes())
    if set_public_key:
        manifest_obj["publicKey"] = key.public_key
    if manifest is not None:
        manifest(manifest_obj)
    manifest_bytes = (encode_file or canonical_json)(manifest_obj)
    rows = [json.loads(line) for line in record_lines(directory)]
    if records is not None:
        rows = records(rows)
    head = hashlib.sha256(manifest_bytes).hexdigest()
    out: list[bytes] = []
    for index, row in enumerate(rows):
        row["prevDigest"] = head
        event = row["event"]
        if resign_checkpoints and event.get("tag") == LedgerCheckpoint.tag:
            event["recordCount"], event["headDigest"] = index, head
            event["signature"] = key.sign(
                LedgerCheckpoint.signed_bytes(manifest_obj["runId"], index, head)
            )
        body = encode_line(index, row) if encode_line is not None else canonical_json(row)
        head = hashlib.sha256(body).hexdigest()
        out.append(body + b"\n")
    data = b"".join(out)
    done: dict[str, Any] = {
        "ledgerFormatVersion": 1,
        "runId": manifest_obj["runId"],
        "recordCount": len(rows),
        "manifestSha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "recordsSha256": hashlib.sha256(data).hexdigest(),
        "headDigest": head,
    }
    if completion is not None:
        completion(done)
    done["signature"] = key.sign(
        canonical_json({k: v for k, v in done.items() if k != "signature"})
    )
    (directory / MANIFEST).write_bytes(manifest_bytes)
    (directory / RECORDS).write_bytes(data)
    (directory / COMPLETION).write_bytes((encode_completion or canonical_json)(done))


def chained_record(directory: Path, speaker: str, text: str) -> bytes:
    """A line that chains onto the ledger's last line, as anyone can write without the key."""
    last = record_lines(directory)[-1].rstrip(b"\n")
    previous = json.loads(last)
    index = previous["logicalSequence"] + 1
    row = {
        **previous,
        "eventId": f"{previous['runId']}:{index}",
        "logicalSequence": index,
        "producer": speaker,
        "prevDigest": hashlib.sha256(last).hexdigest(),
        "event": Said(speaker=speaker, text=text).to_wire(),
    }
    return canonical_json(row) + b"\n"
