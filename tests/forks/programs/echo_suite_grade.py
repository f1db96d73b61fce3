"""Grade a run of the echo suite: the score is the number of messages its agent sent."""

from __future__ import annotations

from typing import Any

from controller.events import core_events
from controller.events.network import RouterMessageCommitted
from ledger import LedgerArtifacts

catalog = core_events


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    sent = [m for m in ledger.events(RouterMessageCommitted) if m.sender_id.startswith("agent:")]
    return {"score": len(sent), "texts": [" ".join(m.parts) for m in sent]}
