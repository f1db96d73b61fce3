"""Grade a run of the bid suite: the higher bid wins (``"tie"`` when they are equal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller import load_suite
from ledger import LedgerArtifacts

suite = load_suite(Path(__file__).resolve().parent / "bid_suite.py")
catalog = suite.run_spec_for(list(suite.competitors)).catalog
BidsSeen = catalog.class_for("acme.bids-seen/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    seen = next(iter(ledger.events(BidsSeen)), None)
    bids: dict[str, int] = dict(getattr(seen, "bids", {}))
    best = max(bids.values(), default=None)
    leaders = [name for name, bid in bids.items() if bid == best]
    return {"bids": bids, "winner": leaders[0] if len(leaders) == 1 else "tie"}
