"""Follow a live ledger from another process: durable records as they commit, until completion."""

from __future__ import annotations

import errno
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import ValidationError

from ledger.canonical import NonCanonicalError, parse_canonical
from ledger.chain import FORM_REASONS, first_error
from ledger.errors import LedgerError, LedgerVerificationError
from ledger.format import COMPLETION, MANIFEST, RECORDS, RecordEnvelope
from ledger.run_artifacts import ledger_refs, locate_ledger


def wait_for_ledger(
    directory: Path | str,
    *,
    timeout: float,
    poll: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """The ledger directory at ``directory`` (a ledger or a run directory) once its manifest.json
    exists, waiting up to ``timeout`` seconds for a run that has not created it yet."""
    deadline = clock() + max(timeout, 0.0)
    while True:
        ledger_dir = _located(Path(directory))
        if ledger_dir is not None and (ledger_dir / MANIFEST).exists():
            return ledger_dir
        if clock() >= deadline:
            raise LedgerVerificationError(
                f"no ledger appeared at {directory} within {timeout:g} s; check the run id and "
                f"that the run started, or wait longer with --timeout",
                reason="manifest-missing",
            )
        sleep(max(min(poll, deadline - clock()), 0.0))


def _located(directory: Path) -> Path | None:
    """The ledger at ``directory``, or None while a run directory has made ``ledger/`` but no
    ledger inside it yet (several ledgers stay an error: waiting cannot make one of them right)."""
    try:
        ledger_dir, _ = locate_ledger(directory)
    except LedgerError:
        if len(ledger_refs(directory)) > 1:
            raise
        return None
    return ledger_dir


def follow_ledger(
    ledger_dir: Path | str,
    *,
    poll_interval: float = 0.1,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[RecordEnvelope]:
    """Yield each record of ``ledger_dir`` once it is durable, in order; stop at completion.

    The writer may have written bytes it has not fsynced yet; this reader fsyncs the file itself
    before yielding what it read, so nothing it shows can be lost to a crash. Each line is checked
    against the hash chain as it arrives (a tampered or foreign line stops the follower with
    ``chain-broken``); run ``verify`` on the finished ledger for the full checks.
    """
    directory = Path(ledger_dir)
    manifest_path, records_path = directory / MANIFEST, directory / RECORDS
    if not directory.is_dir():
        raise LedgerVerificationError(
            f"{directory} is not a directory; pass a ledger directory", reason="manifest-missing"
        )
    while not records_path.exists():  # the writer creates manifest.json, then records.ndjson
        if (directory / COMPLETION).exists():
            raise LedgerVerificationError(
                f"{records_path} is missing but the ledger is complete", reason="records-missing"
            )
        sleep(poll_interval)
    head = hashlib.sha256(manifest_path.read_bytes()).hexdigest()
    sequence = 0
    buffered = b""
    with records_path.open("rb", buffering=0) as handle:
        while True:
            completed = (directory / COMPLETION).exists()  # sampled before reading: no lost tail
            chunk = handle.read()
            if chunk:
                _make_durable(handle.fileno())
                lines = (buffered + chunk).split(b"\n")
                buffered = lines.pop()
                for line in lines:
                    envelope = _checked(line, sequence, head)
                    head = hashlib.sha256(line).hexdigest()
                    sequence += 1
                    yield envelope
                continue
            if completed:
                if buffered:
                    raise LedgerVerificationError(
                        f"{records_path} ends in {len(buffered)} bytes without a newline",
                        reason="torn-tail",
                        record=sequence,
                    )
                return
            sleep(poll_interval)


def _make_durable(fd: int) -> None:
    """fsync flushes the file's pages whichever process wrote them."""
    try:
        os.fsync(fd)
    except OSError as exc:  # a platform that refuses fsync on a read-only descriptor
        if exc.errno not in (errno.EBADF, errno.EINVAL):
            raise


def _checked(line: bytes, sequence: int, head: str) -> RecordEnvelope:
    try:
        envelope = RecordEnvelope.model_validate(parse_canonical(line), strict=True)
    except NonCanonicalError as exc:
        raise LedgerVerificationError(
            f"record {sequence} {exc.detail}",
            reason=FORM_REASONS.get(exc.problem, "record-invalid"),
            record=sequence,
        ) from None
    except ValidationError as exc:
        raise LedgerVerificationError(
            f"record {sequence} breaks the envelope: {first_error(exc)}",
            reason="record-invalid",
            record=sequence,
        ) from None
    if envelope.logical_sequence != sequence:
        raise LedgerVerificationError(
            f"record {sequence} has logicalSequence {envelope.logical_sequence}",
            reason="sequence-gap",
            record=sequence,
        )
    if envelope.prev_digest != head:
        raise LedgerVerificationError(
            f"record {sequence} does not chain to the line before it",
            reason="chain-broken" if sequence else "manifest-digest-mismatch",
            record=sequence,
        )
    return envelope
