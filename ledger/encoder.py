"""The chain's position and the bytes of each record: what a writer encodes, before any I/O."""

from __future__ import annotations

import time
from typing import Any

from ledger.canonical import (
    MAX_NESTING,
    canonical_text,
    json_string,
    nesting_depth,
    sha256_hex,
)
from ledger.errors import LedgerEncodingError
from ledger.events import Event
from ledger.format import (
    CHECKPOINT_EVERY_RECORDS,
    CHECKPOINT_EVERY_SECONDS,
    LedgerCheckpoint,
    utc_now,
)
from ledger.records import Record
from ledger.signer import Signer


class RecordEncoder:
    """Turns events into chained record lines, and signs a checkpoint when one is due.

    Only the writer's committer thread calls it, one batch at a time, so its state needs no lock.
    """

    def __init__(self, run_id: str, manifest_sha: str, signing_key: Signer) -> None:
        self.run_id = run_id
        self._run_id_json = json_string(run_id)
        self.head = manifest_sha
        """The digest of the last record encoded (the manifest's before the first)."""
        self.count = 0
        """Records encoded so far, checkpoints included."""
        self._key = signing_key
        self._started_ns = time.monotonic_ns()
        self._last_elapsed = 0
        self._since_checkpoint = 0
        self._checkpoint_at = time.monotonic()

    @property
    def pending_checkpoint(self) -> bool:
        """Whether records were encoded since the last checkpoint."""
        return self._since_checkpoint > 0

    def seconds_to_checkpoint(self) -> float:
        """How long until a checkpoint falls due by time (infinite when nothing awaits one)."""
        if not self._since_checkpoint:
            return float("inf")
        return self._checkpoint_at + CHECKPOINT_EVERY_SECONDS - time.monotonic()

    def checkpoint_due(self) -> bool:
        return self._since_checkpoint > 0 and (
            self._since_checkpoint >= CHECKPOINT_EVERY_RECORDS
            or time.monotonic() - self._checkpoint_at >= CHECKPOINT_EVERY_SECONDS
        )

    def checkpoint_full(self) -> bool:
        """Whether a checkpoint must come before the next record (the count is reached)."""
        return self._since_checkpoint >= CHECKPOINT_EVERY_RECORDS

    def encode(
        self,
        event: Event,
        producer: str,
        causation_id: str | None,
        correlation_id: str | None,
    ) -> tuple[bytes, Record]:
        """One record line (newline included) chained to the head, and the record it holds."""
        elapsed = max(time.monotonic_ns() - self._started_ns, self._last_elapsed)
        sequence = self.count
        try:
            wire = event.to_wire()  # the writer admitted only its catalog's classes
        except (ValueError, TypeError) as exc:
            raise unencodable(event, exc) from exc
        envelope: dict[str, Any] = {
            "runId": self.run_id,
            "eventId": f"{self.run_id}:{sequence}",
            "logicalSequence": sequence,
            "elapsedNanos": elapsed,
            "observedAt": utc_now(),
            "producer": producer,
            "prevDigest": self.head,
            "event": wire,
        }
        if causation_id is not None:
            envelope["causationId"] = causation_id
        if correlation_id is not None:
            envelope["correlationId"] = correlation_id
        try:
            body = self._spell(envelope, wire, producer, causation_id, correlation_id)
        except (ValueError, TypeError) as exc:  # a lone surrogate, NaN, an over-long integer
            raise unencodable(event, exc) from exc
        if len(body) > 2 * MAX_NESTING and body.count(b"[") + body.count(b"{") > MAX_NESTING:
            if nesting_depth(envelope) > MAX_NESTING:
                too_deep = ValueError(f"it nests more than {MAX_NESTING} levels deep")
                raise unencodable(event, too_deep)
        self._last_elapsed = elapsed
        self.head = sha256_hex(body)
        self.count = sequence + 1
        self._since_checkpoint += 1
        return body + b"\n", Record.from_trusted_wire(envelope, event)

    def _spell(
        self,
        envelope: dict[str, Any],
        wire: dict[str, Any],
        producer: str,
        causation_id: str | None,
        correlation_id: str | None,
    ) -> bytes:
        """``canonical_json(envelope)``, with only the event left to the general encoder.

        The envelope's keys are fixed, so their sorted order is written out here; a test holds
        these bytes equal to ``canonical_json(envelope)``.
        """
        head = ""
        if causation_id is not None:
            head = f'"causationId":{json_string(causation_id)},'
        if correlation_id is not None:
            head += f'"correlationId":{json_string(correlation_id)},'
        text = (
            f'{{{head}"elapsedNanos":{envelope["elapsedNanos"]:d},'
            f'"event":{canonical_text(wire)},"eventId":{json_string(envelope["eventId"])},'
            f'"logicalSequence":{envelope["logicalSequence"]:d},'
            f'"observedAt":{json_string(envelope["observedAt"])},'
            f'"prevDigest":{json_string(envelope["prevDigest"])},'
            f'"producer":{json_string(producer)},"runId":{self._run_id_json}}}'
        )
        return text.encode("utf-8")

    def encode_checkpoint(self) -> bytes:
        """A signed checkpoint of the chain as it stands, as one record line."""
        count, head = self.count, self.head
        signature = self._key.sign(LedgerCheckpoint.signed_bytes(self.run_id, count, head))
        checkpoint = LedgerCheckpoint(record_count=count, head_digest=head, signature=signature)
        line, _ = self.encode(checkpoint, "ledger", None, None)
        self._since_checkpoint = 0
        self._checkpoint_at = time.monotonic()
        return line


def unencodable(event: Event, cause: Exception) -> LedgerEncodingError:
    return LedgerEncodingError(
        f"event {type(event).tag} cannot be written to the ledger: {cause}; the event was not "
        f"recorded (the ledger format takes canonical JSON: UTF-8 text without lone surrogates, "
        f"no NaN or infinities, at most {MAX_NESTING} levels of nesting)"
    )
