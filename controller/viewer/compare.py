"""What makes two runs the same evidence, judged by causality, not by global commit order.

A ledger becomes its ``Evidence``: every conversation's committed messages in that conversation's
commit order (each one's sender, parts, who received it and who lost it with why); every
receiver's deliveries from each conversation, in the order it received them; and the
experiment's own events and the program's outcome. Two runs are the same when all of these
match; how independent messages interleave in the router's global sequence is not part of it.
A fork at N shares its parent's prefix when the parent's first N messages, as per-conversation
prefixes, are the fork's first N as well (``prefix_shared``). Times, ids, digests and ports,
which must differ between runs, are never compared.
"""

from __future__ import annotations

from collections import Counter
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
PROGRAM = "program"
BY = "conversation"
"""How runs are compared (the ``by`` of ``ledger compare`` and ``replay`` lines)."""


@dataclass(frozen=True, slots=True)
class Divergence:
    """The causally earliest place two runs differ: ``index`` (0-based) in ``stream``."""

    stream: str
    index: int
    a: Any
    b: Any
    message: int | None = None
    """For a conversation's message: its 1-based place in ``a``'s commit order (``b``'s when
    ``a`` lacks it)."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """A verified ledger as the comparison sees it."""

    conversations: dict[str, list[dict[str, Any]]]
    """``conversation N`` (by opening order) -> its messages in commit order."""
    deliveries: dict[str, list[int]]
    """``deliveries to RECEIVER in conversation N`` -> the indices of that conversation's
    messages, in the order the receiver received them."""
    program: list[Any]
    order: list[tuple[str, int]]
    """Every committed message as (conversation, index), in router-sequence order."""

    @property
    def messages(self) -> int:
        return len(self.order)

    def streams(self) -> dict[str, list[Any]]:
        return {**self.conversations, **self.deliveries, PROGRAM: self.program}

    def place(self, conversation: str, index: int) -> int | None:
        """The 1-based router-sequence place of a conversation's message, or None."""
        key = (conversation, index)
        return self.order.index(key) + 1 if key in self.order else None


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


def read_evidence(ledger_dir: Path) -> Evidence:
    """``ledger_dir``'s evidence; raises ``LedgerVerificationError`` if it does not verify."""
    return evidence(verified_ledger(ledger_dir))


def evidence(verified: Verification) -> Evidence:
    names: dict[str, str] = {}
    conversations: dict[str, list[dict[str, Any]]] = {}
    committed: list[tuple[int, str, int]] = []
    where: dict[str, tuple[str, int]] = {}
    received: dict[str, list[str]] = {}
    program: list[Any] = []

    def deliver(receiver: str, message_id: str) -> None:
        if message_id in where:
            conversation, index = where[message_id]
            conversations[conversation][index]["delivered"].append(receiver)
            received.setdefault(receiver, []).append(message_id)

    for envelope in validated_records(verified):
        tag, event = envelope.tag, envelope.event
        if tag == OPENED:
            names[event["conversationId"]] = f"conversation {len(names) + 1}"
            conversations[names[event["conversationId"]]] = []
        elif tag == COMMITTED:
            stream = names.get(event["conversationId"], event["conversationId"])
            messages = conversations.setdefault(stream, [])
            where[event["messageId"]] = (stream, len(messages))
            committed.append((int(event["routerSequence"]), stream, len(messages)))
            messages.append(
                {
                    "sender": event["senderId"],
                    "parts": event["parts"],
                    "delivered": [],
                    "dropped": [],
                }
            )
        elif tag == DELIVERED:
            for message_id in event["messageIds"]:
                deliver(event["receiverId"], message_id)
        elif tag == DELIVERED_ONE:
            deliver(event["receiverId"], event["messageId"])
        elif tag == DROPPED and event["messageId"] in where:
            conversation, index = where[event["messageId"]]
            lost = [event["receiverId"], event["reason"]]
            conversations[conversation][index]["dropped"].append(lost)
        elif tag in OUTCOMES or not tag.startswith(("society.", "ledger.")):
            fields = {k: v for k, v in event.items() if k not in VARYING_FIELDS}
            program.append({"producer": envelope.producer, **fields})
    for messages in conversations.values():  # who got it matters, not in which order acks came
        for message in messages:
            message["delivered"].sort()
            message["dropped"].sort()
    deliveries: dict[str, list[int]] = {}
    for receiver in sorted(received):
        for message_id in received[receiver]:
            conversation, index = where[message_id]
            deliveries.setdefault(f"deliveries to {receiver} in {conversation}", []).append(index)
    return Evidence(
        conversations=conversations,
        deliveries=deliveries,
        program=program,
        order=[(stream, index) for _, stream, index in sorted(committed)],
    )


def first_divergence(a: Path, b: Path) -> Divergence | None:
    """Where ledgers ``a`` and ``b`` first differ as evidence, or None when they are the same."""
    return evidence_divergence(read_evidence(a), read_evidence(b))


def evidence_divergence(a: Evidence, b: Evidence) -> Divergence | None:
    """The causally earliest difference: a conversation's first differing message (of several,
    the one committed first), else a receiver's first differing delivery, else the program's."""
    first = conversation_divergence(a, b)
    if first is not None:
        return first
    for streams in ((a.deliveries, b.deliveries), ({PROGRAM: a.program}, {PROGRAM: b.program})):
        for name in _names(*streams):
            index = _first_difference(streams[0].get(name, []), streams[1].get(name, []))
            if index is not None:
                one, other = streams[0].get(name), streams[1].get(name)
                return Divergence(name, index, _at(one, index), _at(other, index))
    return None


def conversation_divergence(a: Evidence, b: Evidence) -> Divergence | None:
    """The first differing message of each conversation; of these, the one committed earliest
    (at the lower of its places in ``a``'s and ``b``'s router sequence)."""
    found: list[tuple[int, Divergence]] = []
    for name in _names(a.conversations, b.conversations):
        one, other = a.conversations.get(name, []), b.conversations.get(name, [])
        index = _first_difference(one, other)
        if index is None:
            continue
        here, there = a.place(name, index), b.place(name, index)
        earliest = min(p for p in (here, there, 1 << 62) if p is not None)
        message = here if here is not None else there
        divergence = Divergence(name, index, _at(one, index), _at(other, index), message)
        found.append((earliest, divergence))
    return min(found, key=lambda pair: pair[0])[1] if found else None


def shared_messages(a: Evidence, b: Evidence) -> int:
    """How many messages sit at the same place of the same conversation in both runs: the sum of
    each conversation's longest common prefix."""
    return sum(
        _first_difference(messages, b.conversations.get(name, []), common=True) or 0
        for name, messages in a.conversations.items()
    )


def prefix_split(run: Evidence, at: int) -> dict[str, int]:
    """How the run's first ``at`` committed messages fall into conversations (``k_c``)."""
    return dict(Counter(conversation for conversation, _ in run.order[:at]))


def prefix_shared(parent: Evidence, fork: Evidence, at: int) -> bool:
    """Whether the parent's first ``at`` messages, as per-conversation prefixes, are each a prefix
    of the fork's conversation and together the fork's first ``at`` messages."""
    split = prefix_split(parent, at)
    if parent.messages < at or prefix_split(fork, at) != split:
        return False
    return all(
        fork.conversations.get(name, [])[:count] == parent.conversations[name][:count]
        for name, count in split.items()
    )


def _names(left: dict[str, Any], right: dict[str, Any]) -> list[str]:
    return [*left, *(name for name in right if name not in left)]


def _first_difference(one: list[Any], other: list[Any], *, common: bool = False) -> int | None:
    """The first index where the lists differ (None when equal; with ``common``, the length of
    their common prefix)."""
    for index in range(max(len(one), len(other))):
        if index >= len(one) or index >= len(other) or one[index] != other[index]:
            return index
    return len(one) if common else None


def _at(items: list[Any] | None, index: int) -> Any:
    return items[index] if items is not None and index < len(items) else None
