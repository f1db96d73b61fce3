"""Per-agent send limits: a message rate and a byte volume, each a token bucket.

Every agent's sends are checked before they are committed; a send over a limit is refused
(``rate-limited``, retry later) and never committed, so a flooding agent can neither crowd the
ledger nor another agent's receivers. The refusals are evidence: each agent's refused sends are
recorded at most once per ``REFUSALS_RECORD_INTERVAL_S`` as one ``RouterSendsRefused`` with their
count and bytes, so the record of a flood is as bounded as the flood.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import anyio

from society_sandbox.network.protocol import MAX_PART_BYTES, MAX_PARTS

MAX_MESSAGE_BYTES = MAX_PARTS * MAX_PART_BYTES
"""The largest message the wire carries (ten parts of 32 KiB of UTF-8)."""
REFUSALS_RECORD_INTERVAL_S = 1.0
MESSAGE_RATE = "message-rate"
MESSAGE_VOLUME = "message-volume"


@dataclass(frozen=True, slots=True)
class MessageLimits:
    """What each agent may send: a sustained rate and a burst, in messages and in bytes of text.

    The defaults sit far above what a conversational agent sends (a turn every few seconds) and
    far below what a loop can (thousands a second); a RunSpec raises them for a chatty society.
    """

    messages_per_second: float = 50.0
    message_burst: int = 200
    bytes_per_second: int = 256 * 1024
    byte_burst: int = 2 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.messages_per_second <= 0 or self.bytes_per_second <= 0:
            raise ValueError("message limits are rates above zero")
        if self.message_burst < 1:
            raise ValueError("message_burst lets at least one message through")
        if self.byte_burst < MAX_MESSAGE_BYTES:
            raise ValueError(
                f"byte_burst must hold the largest message ({MAX_MESSAGE_BYTES} bytes), "
                f"or such a message could never be sent"
            )


DEFAULT_MESSAGE_LIMITS = MessageLimits()


@dataclass(slots=True)
class _Bucket:
    level: float
    at: float

    def take(self, amount: float, rate: float, capacity: float, now: float) -> bool:
        self.level = min(capacity, self.level + (now - self.at) * rate)
        self.at = now
        if self.level < amount:
            return False
        self.level -= amount
        return True


@dataclass(slots=True)
class SendLimiter:
    """Each agent's two buckets, and the refusals not yet recorded."""

    limits: MessageLimits
    _messages: dict[str, _Bucket] = field(default_factory=dict)
    _bytes: dict[str, _Bucket] = field(default_factory=dict)
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(sender id, reason) -> sends refused since the last record."""
    refused_bytes: Counter[tuple[str, str]] = field(default_factory=Counter)

    def check(self, sender_id: str, nbytes: int) -> str | None:
        """Take one message of ``nbytes`` from the sender's buckets; the reason it may not."""
        limits, now = self.limits, anyio.current_time()
        messages = self._messages.get(sender_id)
        if messages is None:
            messages = self._messages[sender_id] = _Bucket(limits.message_burst, now)
            self._bytes[sender_id] = _Bucket(limits.byte_burst, now)
        volume = self._bytes[sender_id]
        reason: str | None = None
        if messages.level + (now - messages.at) * limits.messages_per_second < 1:
            reason = MESSAGE_RATE
        elif not volume.take(nbytes, limits.bytes_per_second, limits.byte_burst, now):
            reason = MESSAGE_VOLUME
        else:
            messages.take(1, limits.messages_per_second, limits.message_burst, now)
            return None
        self.refused[sender_id, reason] += 1
        self.refused_bytes[sender_id, reason] += nbytes
        return reason

    def take_refusals(self) -> list[tuple[str, str, int, int]]:
        """(sender id, reason, sends, bytes) refused since the last call, and forget them."""
        taken = [
            (sender, reason, count, self.refused_bytes[sender, reason])
            for (sender, reason), count in self.refused.items()
        ]
        self.refused.clear()
        self.refused_bytes.clear()
        return taken
