"""``society ledger compare A B``: the first divergence between two runs' ledgers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_compare(commands: Any) -> None:
    compare = commands.add_parser(
        "compare",
        help="compare two ledgers event by event per conversation; print the first divergence",
        description=(
            "Verifies both ledgers, then compares them by causality: each conversation's "
            "messages in its commit order (sender, text, who received or lost each), each "
            "receiver's deliveries per conversation in the order it received them, and the "
            "experiment's own events and outcome; how independent messages interleaved and the "
            "times and ids that must differ between runs are ignored. When one is a fork of the "
            "other, the line's fork says whether it holds (its parent's run id and head digest, "
            "and the parent's first N messages, per conversation, are the fork's first N) and "
            "the causally earliest differing message. Prints one JSON line; exit 0 when they "
            "agree (a fork: when it holds), 1 at the first divergence or when a ledger does not "
            "verify."
        ),
    )
    compare.add_argument("a", type=Path, metavar="A", help="a ledger or run directory")
    compare.add_argument("b", type=Path, metavar="B", help="a ledger or run directory")
    compare.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    from controller.viewer.compare import BY, evidence_divergence, read_evidence
    from controller.viewer.forks import fork_relation
    from controller.viewer.records import find_ledger
    from ledger import LedgerError

    try:
        a, b = find_ledger(args.a), find_ledger(args.b)
        left = read_evidence(a)
        divergence = evidence_divergence(left, read_evidence(b))
        relation = fork_relation(a, b)
    except LedgerError as exc:
        print(json.dumps({"same": False, "reason": exc.reason, "detail": exc.detail}))
        return 1
    fork = {} if relation is None else {"fork": relation.to_wire()}
    if divergence is None:
        streams, messages = len(left.streams()), left.messages
        print(
            json.dumps({"same": True, "by": BY, "streams": streams, "messages": messages, **fork})
        )
        return 0 if relation is None or relation.holds else 1
    found: dict[str, Any] = {"stream": divergence.stream, "index": divergence.index}
    if divergence.message is not None:
        found["message"] = divergence.message
    print(
        json.dumps(
            {
                "same": False,
                "by": BY,
                "divergence": {**found, "a": divergence.a, "b": divergence.b},
                **fork,
            },
            ensure_ascii=False,
        )
    )
    return 0 if relation is not None and relation.holds else 1
