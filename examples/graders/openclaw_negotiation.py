"""Grade an OpenClaw negotiation run: who spoke, what the partition dropped, what it cost.

    society grade examples/graders/openclaw_negotiation.py <ledger-dir>

Spoken messages are the router's commits; dropped ones the link stage's ``LinkMessageDropped``;
tokens the model gateway's own ``AgentModelUsage``; OpenClaw's transcripts the harvested files,
by digest.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import (
    OPENCLAW_TRANSCRIPT,
    AgentModelUsage,
    AgentWorkspaceFileHarvested,
    LinkMessageDropped,
    OpenClawAgentConfigured,
    RouterMessageCommitted,
    load_run_spec,
)
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "openclaw_negotiation.py")
catalog = run_spec.catalog
PartitionWindow = run_spec.events.class_for("acme.openclaw-partition-window/v1")
PricePositions = run_spec.events.class_for("acme.openclaw-price-positions/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    spoke = Counter(_name(m.sender_id) for m in ledger.events(RouterMessageCommitted))
    dropped = list(ledger.events(LinkMessageDropped))
    usage: dict[str, dict[str, int]] = {
        name: {"calls": 0, "promptTokens": 0, "completionTokens": 0} for name in run_spec.agents
    }
    for call in ledger.events(AgentModelUsage):
        tally = usage.setdefault(call.agent, {"calls": 0, "promptTokens": 0, "completionTokens": 0})
        tally["calls"] += 1
        tally["promptTokens"] += call.prompt_tokens or 0
        tally["completionTokens"] += call.completion_tokens or 0
    window = next(iter(ledger.events(PartitionWindow)), None)
    positions = next(iter(ledger.events(PricePositions)), None)
    transcripts = {
        h.agent: h.sha256
        for h in ledger.events(AgentWorkspaceFileHarvested)
        if h.path == OPENCLAW_TRANSCRIPT and h.outcome == "harvested"
    }
    return {
        "spoke": {name: spoke.get(name, 0) for name in [*run_spec.agents, "market"]},
        "messagesDropped": len(dropped),
        "droppedByLink": dict(
            sorted(Counter(f"{d.sender_id} -> {d.receiver_id}" for d in dropped).items())
        ),
        "partitionMessages": None if window is None else window.messages,
        "usage": usage,
        "openclaw": {e.agent: e.server_version for e in ledger.events(OpenClawAgentConfigured)},
        "transcripts": transcripts,
        "positions": None if positions is None else positions.positions,
    }


def _name(participant_id: str) -> str:
    return participant_id.partition(":")[2] or participant_id
