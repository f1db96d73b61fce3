"""Grade a run of examples/negotiation.py seat by seat: each side's share of the agreed split
(``split <alice>/<bob>``), whether it accepted, and how many messages it sent; the run's own
numbers beside them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import RouterMessageCommitted, load_run_spec
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[3] / "examples" / "negotiation.py")
catalog = run_spec.catalog
ConsensusReached = run_spec.events.class_for("acme.consensus-reached/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    messages = list(ledger.events(RouterMessageCommitted))
    consensus = next(iter(ledger.events(ConsensusReached)))
    alice, bob = (int(share) for share in consensus.proposal.removeprefix("split ").split("/"))
    accepted = {m.sender_id for m in messages if " ".join(m.parts).startswith("ACCEPT ")}
    return {
        "share": {"alice": alice, "bob": bob},
        "accepted": {name: f"agent:{name}" in accepted for name in ("alice", "bob")},
        "sent": dict(Counter(m.sender_id for m in messages)),
        "agreed": True,
        "proposals": sum(" ".join(m.parts).startswith("PROPOSE ") for m in messages),
        "proposal": consensus.proposal,
    }
