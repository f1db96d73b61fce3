"""Same-seed comparison of two ledgers: event by event, per conversation, ignoring what must
differ between runs (times, ids, digests, ports, the run's own identity).

Each ledger becomes streams: one per conversation (in the order conversations opened) holding
each message's sender, text, and who received or lost it; and one of the experiment's own
events (customer tags) and the program outcome. The first place two streams differ is the
divergence.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ledger import EventCatalog
from ledger.format import RecordEnvelope
from ledger.verification import Verification, verify_ledger

COMMITTED = "society.router-message-committed/v1"
DELIVERED = "society.router-messages-delivered/v1"
DELIVERED_ONE = "society.router-message-delivered/v1"  # what older routers wrote
DROPPED = "society.link-message-dropped/v1"
OPENED = "society.conversation-opened/v1"
OUTCOMES = (
    "society.program-succeeded/v2",
    "society.program-succeeded/v1",
    "society.program-failed/v1",
    "society.program-interrupted/v1",
    "society.platform-failed/v1",
)
VARYING_FIELDS = frozenset({"elapsedMs", "startupMs", "latencyMs", "conversationId", "messageId"})


@dataclass(frozen=True, slots=True)
class Divergence:
    stream: str
    index: int
    a: Any
    b: Any


@cache
def _reader_catalog() -> EventCatalog:
    from controller.agents.shipped import shipped_runtime_catalogs
    from controller.events import core_events

    return EventCatalog.merge(core_events, *shipped_runtime_catalogs().values())


def verified_ledger(ledger_dir: Path) -> Verification:
    """Verify ``ledger_dir`` decoding every core and shipped runtime event: each such record is
    validated against its class (``event-invalid`` otherwise), as ``society ledger verify`` does."""
    return verify_ledger(_reader_catalog(), ledger_dir, require_catalog=False)


def validated_records(verified: Verification) -> Iterator[RecordEnvelope]:
    """The records a comparison may read: decoded (so validated) ones, and the experiment's own
    events, which it only copies. A ``society.`` or ``ledger.`` record no class decoded is
    skipped: its fields were never checked."""
    for envelope, event in zip(verified.envelopes, verified.events, strict=True):
        if event is not None or not envelope.tag.startswith(("society.", "ledger.")):
            yield envelope


def streams(ledger_dir: Path) -> dict[str, list[Any]]:
    """The ledger's comparable streams; raises ``LedgerVerificationError`` if it does not verify."""
    verified = verified_ledger(ledger_dir)
    conversations: dict[str, list[dict[str, Any]]] = {}
    names: dict[str, str] = {}
    messages: dict[str, dict[str, Any]] = {}
    program: list[Any] = []
    for envelope in validated_records(verified):
        tag, event = envelope.tag, envelope.event
        if tag == OPENED:
            names[event["conversationId"]] = f"conversation {len(names) + 1}"
            conversations[names[event["conversationId"]]] = []
        elif tag == COMMITTED:
            message = {
                "sender": event["senderId"],
                "parts": event["parts"],
                "delivered": [],
                "dropped": [],
            }
            messages[event["messageId"]] = message
            stream = names.get(event["conversationId"], event["conversationId"])
            conversations.setdefault(stream, []).append(message)
        elif tag == DELIVERED:
            for message_id in event["messageIds"]:
                if message_id in messages:
                    messages[message_id]["delivered"].append(event["receiverId"])
        elif tag == DELIVERED_ONE and event["messageId"] in messages:
            messages[event["messageId"]]["delivered"].append(event["receiverId"])
        elif tag == DROPPED and event["messageId"] in messages:
            entry = [event["receiverId"], event["reason"]]
            messages[event["messageId"]]["dropped"].append(entry)
        elif tag in OUTCOMES or not tag.startswith(("society.", "ledger.")):
            fields = {k: v for k, v in event.items() if k not in VARYING_FIELDS}
            program.append({"producer": envelope.producer, **fields})
    for message in messages.values():  # who got it matters, not in which order acks came back
        message["delivered"].sort()
        message["dropped"].sort()
    return {**conversations, "program": program}


def first_divergence(a: Path, b: Path) -> Divergence | None:
    left, right = streams(a), streams(b)
    for name in [*left, *(key for key in right if key not in left)]:
        one, other = left.get(name), right.get(name)
        if one is None or other is None:
            return Divergence(name, 0, one is not None, other is not None)
        for index in range(max(len(one), len(other))):
            x = one[index] if index < len(one) else None
            y = other[index] if index < len(other) else None
            if x != y:
                return Divergence(name, index, x, y)
    return None
