"""A fork checked against its parent: the parent it names, the prefix it shares, where it departs.

A fork's ``RunStarted`` names its parent's run id and head digest and the fork point N (a count of
router-committed messages). Given both ledgers, the fork holds when the parent is the one it
names (same run id, same head digest) and the two agree message for message, in router sequence
order, on the first N messages: each one's conversation, sender, text, and who received or lost
it. The first message after N where they differ is where the intervention showed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.viewer.compare import (
    COMMITTED,
    DELIVERED,
    DELIVERED_ONE,
    DROPPED,
    OPENED,
    validated_records,
    verified_ledger,
)
from ledger.run_artifacts import locate_ledger
from ledger.verification import Verification

RUN_STARTED = "society.run-started/v1"


@dataclass(frozen=True, slots=True)
class ForkRelation:
    """What a fork's ledger and its parent's say of each other."""

    fork: str
    parent: str
    at: int
    head_digest_matches: bool
    shared_until: int
    """How many leading messages the two agree on (``>= at`` when the prefix is shared)."""
    first_difference: dict[str, Any] | None
    """The first message (1-based ``message``) where they differ, with each side's; or None."""

    @property
    def holds(self) -> bool:
        return self.head_digest_matches and self.shared_until >= self.at

    def to_wire(self) -> dict[str, Any]:
        return {
            "fork": self.fork,
            "parent": self.parent,
            "at": self.at,
            "holds": self.holds,
            "headDigest": "matches" if self.head_digest_matches else "differs",
            "prefix": "shared" if self.shared_until >= self.at else "differs",
            "sharedMessages": self.shared_until,
            "firstDifference": self.first_difference,
        }


def fork_relation(a: Path, b: Path) -> ForkRelation | None:
    """The fork relation between ledgers ``a`` and ``b`` (either way round), or None when neither
    names the other as its parent; raises ``LedgerError`` when one does not verify."""
    left, right = _verified(a), _verified(b)
    for child, parent in ((left, right), (right, left)):
        origin = _origin(child)
        if origin is not None and origin.get("parentRunId") == parent.manifest.run_id:
            return _relation(child, parent, origin)
    return None


def _relation(child: Verification, parent: Verification, origin: dict[str, Any]) -> ForkRelation:
    at = int(origin["at"])
    head = None if parent.completion is None else parent.completion.head_digest
    mine, theirs = messages_in_order(child), messages_in_order(parent)
    shared = 0
    while shared < min(len(mine), len(theirs)) and mine[shared] == theirs[shared]:
        shared += 1
    difference = None
    if shared < max(len(mine), len(theirs)):
        difference = {
            "message": shared + 1,
            "parent": theirs[shared] if shared < len(theirs) else None,
            "fork": mine[shared] if shared < len(mine) else None,
        }
    return ForkRelation(
        fork=child.manifest.run_id,
        parent=parent.manifest.run_id,
        at=at,
        head_digest_matches=head == origin.get("parentHeadDigest"),
        shared_until=shared,
        first_difference=difference,
    )


def messages_in_order(verified: Verification) -> list[dict[str, Any]]:
    """Every committed message in router-sequence order: its conversation (by opening order),
    sender, parts, and who received or lost it (sorted)."""
    conversations: dict[str, str] = {}
    messages: dict[str, dict[str, Any]] = {}
    for envelope in validated_records(verified):
        tag, event = envelope.tag, envelope.event
        if tag == OPENED:
            conversations[event["conversationId"]] = f"conversation {len(conversations) + 1}"
        elif tag == COMMITTED:
            messages[event["messageId"]] = {
                "sequence": event["routerSequence"],
                "conversation": conversations.get(event["conversationId"]),
                "sender": event["senderId"],
                "parts": event["parts"],
                "delivered": [],
                "dropped": [],
            }
        elif tag == DELIVERED:
            for message_id in event["messageIds"]:
                if message_id in messages:
                    messages[message_id]["delivered"].append(event["receiverId"])
        elif tag == DELIVERED_ONE and event["messageId"] in messages:
            messages[event["messageId"]]["delivered"].append(event["receiverId"])
        elif tag == DROPPED and event["messageId"] in messages:
            messages[event["messageId"]]["dropped"].append([event["receiverId"], event["reason"]])
    ordered = sorted(messages.values(), key=lambda message: int(message["sequence"]))
    for message in ordered:
        del message["sequence"]  # the same message may sit at another number in the other run
        message["delivered"].sort()
        message["dropped"].sort()
    return ordered


def _verified(path: Path) -> Verification:
    ledger, _ = locate_ledger(path)
    return verified_ledger(ledger)


def _origin(verified: Verification) -> dict[str, Any] | None:
    for envelope in validated_records(verified):
        if envelope.tag == RUN_STARTED:
            fork = envelope.event.get("fork")
            return fork if isinstance(fork, dict) else None
    return None
