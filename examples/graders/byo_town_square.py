"""Grade a bring-your-own-agent run: did both programs speak, and was every model call metered?

    society grade examples/graders/byo_town_square.py <ledger-dir>

Messages are the router's commits; model calls are the gateway's own records
(``AgentModelUsage``). ``passed``: nod answered the host, ada answered nod with the model, and
every model call is ada's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import AgentModelUsage, RouterMessageCommitted, load_run_spec
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "byo" / "town_square.py")
catalog = run_spec.catalog


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    messages = list(ledger.events(RouterMessageCommitted))
    spoke = Counter(m.sender_id.partition(":")[2] for m in messages)
    calls = list(ledger.events(AgentModelUsage))
    by_agent = Counter(call.agent for call in calls)
    nod_asked_ada = any(
        m.sender_id == "agent:nod" and any("@ada" in part for part in m.parts) for m in messages
    )
    return {
        "messages": dict(sorted(spoke.items())),
        "modelCalls": dict(sorted(by_agent.items())),
        "promptTokens": sum(call.prompt_tokens or 0 for call in calls),
        "completionTokens": sum(call.completion_tokens or 0 for call in calls),
        "passed": nod_asked_ada
        and spoke["ada"] >= 1
        and by_agent["ada"] >= spoke["ada"]
        and set(by_agent) == {"ada"},
    }
