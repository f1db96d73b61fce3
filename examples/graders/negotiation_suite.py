"""Grade one run of the negotiation suite: the side with the bigger agreed share wins.

    society grade examples/graders/negotiation_suite.py <ledger-dir>

``winner`` is a competitor's name, or ``"tie"`` for an even split or no deal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller import RouterMessageCommitted, load_suite
from ledger import LedgerArtifacts

suite = load_suite(Path(__file__).resolve().parents[1] / "negotiation_suite.py")
catalog = suite.run_spec_for(list(suite.competitors)[:2]).catalog
SplitAgreed = catalog.class_for("acme.split-agreed/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    agreed = next(iter(ledger.events(SplitAgreed)), None)
    proposals = sum(
        1 for m in ledger.events(RouterMessageCommitted) if " ".join(m.parts).startswith("PROPOSE ")
    )
    shares: dict[str, int] = dict(getattr(agreed, "shares", {}))
    best = max(shares.values(), default=None)
    leaders = [name for name, share in shares.items() if share == best]
    return {
        "agreed": agreed is not None,
        "shares": shares,
        "proposals": proposals,
        "winner": leaders[0] if len(leaders) == 1 else "tie",
    }
