"""Grade a town meeting of llm agents: who spoke, what each cost, why each stopped, the tally.

    society grade examples/graders/llm_society_grade.py <ledger-dir>

Messages are the router's commits; tokens are the model gateway's own measurements
(``AgentModelUsage``), summed per resident; the tables and the tally are the program's events.
Residents are read from the ledger (``LLMAgentConfigured``), so a town of any size grades.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from controller import (
    AgentModelCallFailed,
    AgentModelUsage,
    LLMAgentConfigured,
    LLMAgentStopped,
    RouterMessageCommitted,
    load_run_spec,
)
from ledger import LedgerArtifacts

run_spec = load_run_spec(Path(__file__).resolve().parents[1] / "llm_society.py")
catalog = run_spec.catalog
TableTalk = run_spec.events.class_for("acme.town-table-talk/v1")
TownTally = run_spec.events.class_for("acme.town-tally/v1")


def grade(ledger: LedgerArtifacts) -> dict[str, Any]:
    residents = sorted(e.agent for e in ledger.events(LLMAgentConfigured))
    spoke = Counter(m.sender_id.partition(":")[2] for m in ledger.events(RouterMessageCommitted))
    calls: Counter[str] = Counter()
    prompt: Counter[str] = Counter()
    completion: Counter[str] = Counter()
    for call in ledger.events(AgentModelUsage):
        calls[call.agent] += 1
        prompt[call.agent] += call.prompt_tokens or 0
        completion[call.agent] += call.completion_tokens or 0
    stopped = Counter(s.reason for s in ledger.events(LLMAgentStopped))
    tables = list(ledger.events(TableTalk))
    tally = next(iter(ledger.events(TownTally)), None)
    return {
        "residents": len(residents),
        "spoke": sum(1 for name in residents if spoke[name]),
        "messages": sum(spoke[name] for name in residents),
        "hallMessages": spoke["town-hall"],
        "modelCalls": sum(calls.values()),
        "callsPerResident": dict(sorted(Counter(calls[name] for name in residents).items())),
        "failedCalls": sum(1 for _ in ledger.events(AgentModelCallFailed)),
        "promptTokens": sum(prompt.values()),
        "completionTokens": sum(completion.values()),
        "usage": {
            name: {
                "calls": calls[name],
                "promptTokens": prompt[name],
                "completionTokens": completion[name],
            }
            for name in residents
        },
        "stopped": dict(sorted(stopped.items())),
        "tables": len(tables),
        "nudges": sum(t.nudges for t in tables),
        "tally": None if tally is None else tally.tally,
        "winner": None if tally is None else tally.winner,
    }
