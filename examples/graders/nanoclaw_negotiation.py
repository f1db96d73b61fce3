"""Grade a NanoClaw negotiation run: who spoke, what it cost, what each agent ran.

    society grade examples/graders/nanoclaw_negotiation.py <ledger-dir>

Spoken messages are the router's commits; tokens the model gateway's own ``AgentModelUsage``;
versions the runtime's ``NanoClawAgentConfigured``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import (
    AgentModelUsage,
    NanoClawAgentConfigured,
    RouterMessageCommitted,
    load_run_spec,
)
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "nanoclaw_negotiation.py")
catalog = run_spec.catalog
PricePositions = run_spec.events.class_for("acme.nanoclaw-price-positions/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    spoke = Counter(_name(m.sender_id) for m in ledger.events(RouterMessageCommitted))
    usage: dict[str, dict[str, int]] = {
        name: {"calls": 0, "promptTokens": 0, "completionTokens": 0} for name in run_spec.agents
    }
    for call in ledger.events(AgentModelUsage):
        tally = usage.setdefault(call.agent, {"calls": 0, "promptTokens": 0, "completionTokens": 0})
        tally["calls"] += 1
        tally["promptTokens"] += call.prompt_tokens or 0
        tally["completionTokens"] += call.completion_tokens or 0
    positions = next(iter(ledger.events(PricePositions)), None)
    return {
        "spoke": {name: spoke.get(name, 0) for name in [*run_spec.agents, "market"]},
        "usage": usage,
        "nanoclaw": {e.agent: e.sdk_version for e in ledger.events(NanoClawAgentConfigured)},
        "positions": None if positions is None else positions.positions,
    }


def _name(participant_id: str) -> str:
    return participant_id.partition(":")[2] or participant_id
