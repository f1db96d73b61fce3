"""A fork checked against its parent: the parent it names, the prefix it shares, where it departs.

A fork's ``RunStarted`` names its parent's run id and head digest and the fork point N (a count of
router-committed messages). Given both ledgers, the fork holds when the parent is the one it
names (same run id, same head digest) and it shares the parent's first N messages causally
(``controller.viewer.compare.prefix_shared``): the parent's first N, taken per conversation, are
each a prefix of the fork's conversation and together the fork's first N, whatever order two
conversations' messages raced in. The causally earliest differing message is where the
intervention showed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.viewer.compare import (
    BY,
    Evidence,
    conversation_divergence,
    evidence,
    prefix_shared,
    prefix_split,
    shared_messages,
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
    prefix_shared: bool
    shared_messages: int
    """How many messages sit at the same place of the same conversation in both."""
    prefix_split: dict[str, int]
    """How the parent's first N messages fall into conversations."""
    first_difference: dict[str, Any] | None
    """The causally earliest differing message (its ``conversation``, 0-based ``index`` there,
    1-based ``message`` in the parent's commit order), with each side's; or None."""

    @property
    def holds(self) -> bool:
        return self.head_digest_matches and self.prefix_shared

    def to_wire(self) -> dict[str, Any]:
        return {
            "fork": self.fork,
            "parent": self.parent,
            "at": self.at,
            "by": BY,
            "holds": self.holds,
            "headDigest": "matches" if self.head_digest_matches else "differs",
            "prefix": "shared" if self.prefix_shared else "differs",
            "prefixConversations": self.prefix_split,
            "sharedMessages": self.shared_messages,
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
    mine, theirs = evidence(child), evidence(parent)
    return ForkRelation(
        fork=child.manifest.run_id,
        parent=parent.manifest.run_id,
        at=at,
        head_digest_matches=head == origin.get("parentHeadDigest"),
        prefix_shared=prefix_shared(theirs, mine, at),
        shared_messages=shared_messages(theirs, mine),
        prefix_split=prefix_split(theirs, at),
        first_difference=first_difference(theirs, mine),
    )


def first_difference(parent: Evidence, fork: Evidence) -> dict[str, Any] | None:
    divergence = conversation_divergence(parent, fork)
    if divergence is None:
        return None
    return {
        "conversation": divergence.stream,
        "index": divergence.index,
        "message": divergence.message,
        "parent": divergence.a,
        "fork": divergence.b,
    }


def _verified(path: Path) -> Verification:
    ledger, _ = locate_ledger(path)
    return verified_ledger(ledger)


def _origin(verified: Verification) -> dict[str, Any] | None:
    for envelope in validated_records(verified):
        if envelope.tag == RUN_STARTED:
            fork = envelope.event.get("fork")
            return fork if isinstance(fork, dict) else None
    return None
