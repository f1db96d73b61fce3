"""Grade a partition run: which committed messages never reached a receiver, and why.

    society grade examples/graders/partition.py <ledger-dir>

A message is owed to every participant of its conversation but its sender. Each
(message, receiver) pair with a ``RouterMessageCommitted`` that no ``RouterMessagesDelivered``
lists was committed and never delivered; ``LinkMessageDropped`` says when the link stage dropped
it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import (
    ConversationOpened,
    LinkMessageDropped,
    RouterMessageCommitted,
    delivered_pairs,
    load_run_spec,
)
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "partition.py")
catalog = run_spec.catalog


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    members = {c.conversation_id: c.participants for c in ledger.events(ConversationOpened)}
    delivered = set(delivered_pairs(record.event for record in ledger))
    dropped = {(d.message_id, d.receiver_id): d.reason for d in ledger.events(LinkMessageDropped)}
    committed = list(ledger.events(RouterMessageCommitted))
    never: list[dict[str, str]] = []
    for message in committed:
        for receiver in members.get(message.conversation_id, []):
            key = (message.message_id, receiver)
            if receiver != message.sender_id and key not in delivered:
                never.append(
                    {
                        "messageId": message.message_id,
                        "sender": message.sender_id,
                        "receiver": receiver,
                        "droppedBy": dropped.get(key, "unexplained"),
                    }
                )
    by_link = Counter(f"{n['sender']} -> {n['receiver']}" for n in never)
    return {
        "messagesCommitted": len(committed),
        "committedNeverDelivered": len(never),
        "droppedByLinks": len(dropped),
        "unexplained": sum(1 for n in never if n["droppedBy"] == "unexplained"),
        "byLink": dict(sorted(by_link.items())),
        "undelivered": never,
    }
