"""Grade a negotiation run: did alice and bob agree, on what, after how many proposals?

society grade examples/graders/negotiation.py <ledger-dir>
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller import ProgramSucceeded, RouterMessageCommitted, load_run_spec
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "negotiation.py")
catalog = run_spec.catalog
ConsensusReached = run_spec.events.class_for("acme.consensus-reached/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    texts = [" ".join(m.parts) for m in ledger.events(RouterMessageCommitted)]
    proposals = [text.removeprefix("PROPOSE ") for text in texts if text.startswith("PROPOSE ")]
    consensus = next(iter(ledger.events(ConsensusReached)), None)
    return {
        "agreed": consensus is not None,
        "proposal": getattr(consensus, "proposal", None),
        "supporters": list(getattr(consensus, "supporters", [])),
        "proposals": len(proposals),
        "offers": proposals,
        "programSucceeded": any(True for _ in ledger.events(ProgramSucceeded)),
    }
