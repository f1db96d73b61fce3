"""Grade a prisoner's dilemma run: each seat's payoff and whether it cooperated; the run's
number of defections."""

from __future__ import annotations

from typing import Any

from pd_suite import Moves, build

from ledger import LedgerArtifacts

catalog = build({"a": "C", "b": "D"}).catalog
PAYOFF = {("C", "C"): (3, 3), ("C", "D"): (0, 5), ("D", "C"): (5, 0), ("D", "D"): (1, 1)}


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    (event,) = ledger.events(Moves)
    (first, a), (second, b) = event.moves.items()
    mine, theirs = PAYOFF[(a, b)]
    return {
        "payoff": {first: mine, second: theirs},
        "cooperated": {seat: move == "C" for seat, move in event.moves.items()},
        "defections": [a, b].count("D"),
    }
