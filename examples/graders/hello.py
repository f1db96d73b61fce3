"""Grade a hello run: who spoke, and did both agents greet?

society grade examples/graders/hello.py artifacts/<run id>
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import RouterMessageCommitted, load_run_spec
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "hello.py")
catalog = run_spec.catalog


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    messages = list(ledger.events(RouterMessageCommitted))
    spoke = Counter(message.sender_id for message in messages)
    return {
        "messages": len(messages),
        "spoke": dict(sorted(spoke.items())),
        "bothGreeted": spoke["agent:ann"] >= 1 and spoke["agent:ben"] >= 1,
    }
