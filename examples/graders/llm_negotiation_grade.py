"""Grade an llm negotiation run: who spoke how often, what the partition dropped, what it cost.

    society grade examples/graders/llm_negotiation_grade.py <ledger-dir>

Spoken messages are the router's commits; dropped ones the link stage's ``LinkMessageDropped``.
Tokens and cost are the model gateway's own measurements (``AgentModelUsage``), not what the
agents say; a cost that is unknown for any call stays unknown (``null``) in its sums.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import (
    AgentModelBudgetReached,
    AgentModelUsage,
    LinkMessageDropped,
    LLMAgentStopped,
    RouterMessageCommitted,
    load_run_spec,
)
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "llm_negotiation.py")
catalog = run_spec.catalog
PartitionWindow = run_spec.events.class_for("acme.llm-partition-window/v1")
BudgetPositions = run_spec.events.class_for("acme.budget-positions/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    spoke = Counter(_name(m.sender_id) for m in ledger.events(RouterMessageCommitted))
    dropped = list(ledger.events(LinkMessageDropped))
    usage: dict[str, dict[str, Any]] = {
        name: {"calls": 0, "promptTokens": 0, "completionTokens": 0, "costUsd": 0.0}
        for name in run_spec.agents
    }
    for call in ledger.events(AgentModelUsage):
        tally = usage.setdefault(
            call.agent, {"calls": 0, "promptTokens": 0, "completionTokens": 0, "costUsd": 0.0}
        )
        tally["calls"] += 1
        for key, value in (
            ("promptTokens", call.prompt_tokens),
            ("completionTokens", call.completion_tokens),
            ("costUsd", call.cost_usd),
        ):
            tally[key] = None if tally[key] is None or value is None else tally[key] + value
    window = next(iter(ledger.events(PartitionWindow)), None)
    positions = next(iter(ledger.events(BudgetPositions)), None)
    return {
        "spoke": {name: spoke.get(name, 0) for name in [*run_spec.agents, "chair"]},
        "messagesCommitted": sum(spoke.values()),
        "messagesDropped": len(dropped),
        "droppedByLink": dict(
            sorted(Counter(f"{d.sender_id} -> {d.receiver_id}" for d in dropped).items())
        ),
        "partition": None
        if window is None
        else {"isolated": window.isolated, "messages": window.messages},
        "usage": usage,
        "total": {
            key: _sum(tally[key] for tally in usage.values())
            for key in ("calls", "promptTokens", "completionTokens", "costUsd")
        },
        "stopped": {s.agent: s.reason for s in ledger.events(LLMAgentStopped)},
        "budgetsReached": [b.agent for b in ledger.events(AgentModelBudgetReached)],
        "positions": None if positions is None else positions.positions,
        "agreed": None if positions is None else positions.agreed,
    }


def _name(participant_id: str) -> str:
    return participant_id.partition(":")[2] or participant_id  # "agent:ada" -> "ada"


def _sum(values: Any) -> Any:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total
