"""Per-agent tallies of model use; an unknown count or cost keeps its sum unknown."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from controller.modelgateway.events import (
    AgentModelBudgetReached,
    AgentModelCallFailed,
    AgentModelUsage,
    ModelGatewayStarted,
    ModelUseEnd,
    model_gateway_catalog,
)

N = TypeVar("N", int, float)


class AgentUsage(BaseModel):
    """One agent's model use so far. A ``None`` total means some call's figure was unknown."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    calls: int
    failed_calls: int
    refused_calls: int
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    ended_by: ModelUseEnd | None = None


class UsageSummary(BaseModel):
    """Model use per agent and over all agents."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    agents: dict[str, AgentUsage]
    total: AgentUsage


@dataclass(slots=True)
class UsageTally:
    calls: int = 0
    failed_calls: int = 0
    refused_calls: int = 0
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    cost_usd: float | None = 0.0
    ended_by: ModelUseEnd | None = None

    def add_usage(self, event: AgentModelUsage) -> None:
        self.calls += 1
        self.prompt_tokens = _plus(self.prompt_tokens, event.prompt_tokens)
        self.completion_tokens = _plus(self.completion_tokens, event.completion_tokens)
        self.cost_usd = _plus(self.cost_usd, event.cost_usd)

    @property
    def tokens(self) -> int | None:
        return _plus(self.prompt_tokens, self.completion_tokens)

    def add_failure(self, event: AgentModelCallFailed) -> None:
        self.calls += 1
        self.failed_calls += 1
        if event.ends_model_use and self.ended_by is None:
            self.ended_by = "auth" if event.error_class == "auth" else "quota"

    def snapshot(self) -> AgentUsage:
        return AgentUsage(
            calls=self.calls,
            failed_calls=self.failed_calls,
            refused_calls=self.refused_calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=self.cost_usd,
            ended_by=self.ended_by,
        )


def summarize(tallies: dict[str, UsageTally]) -> UsageSummary:
    total = UsageTally()
    for tally in tallies.values():
        total.calls += tally.calls
        total.failed_calls += tally.failed_calls
        total.refused_calls += tally.refused_calls
        total.prompt_tokens = _plus(total.prompt_tokens, tally.prompt_tokens)
        total.completion_tokens = _plus(total.completion_tokens, tally.completion_tokens)
        total.cost_usd = _plus(total.cost_usd, tally.cost_usd)
    return UsageSummary(
        agents={agent: tally.snapshot() for agent, tally in sorted(tallies.items())},
        total=total.snapshot(),
    )


def usage_from_records(lines: Iterable[bytes | str]) -> UsageSummary | None:
    """The usage summary a run's ledger records (lines of ``records.ndjson``), for a run that
    returned no result (interrupted, cancelled); ``None`` when its gateway never started.

    It counts what the gateway recorded: answered and failed calls, tokens, cost and why model
    use ended. Calls the gateway refused leave no record, so ``refusedCalls`` stays 0 here. A
    torn last line (a run killed mid-write) is skipped."""
    tallies: dict[str, UsageTally] | None = None
    for line in lines:
        try:
            event = json.loads(line)["event"]
            tag = event["tag"]
            if tag not in model_gateway_catalog:
                continue
            decoded = model_gateway_catalog.decode(event)
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(decoded, ModelGatewayStarted):
            tallies = tallies if tallies is not None else {}
            for agent in decoded.agents:
                tallies.setdefault(agent, UsageTally())
        elif tallies is None:
            continue
        elif isinstance(decoded, AgentModelUsage):
            tallies.setdefault(decoded.agent, UsageTally()).add_usage(decoded)
        elif isinstance(decoded, AgentModelCallFailed):
            tallies.setdefault(decoded.agent, UsageTally()).add_failure(decoded)
        elif isinstance(decoded, AgentModelBudgetReached):
            tallies.setdefault(decoded.agent, UsageTally()).ended_by = "token_budget"
    return None if tallies is None else summarize(tallies)


def _plus(total: N | None, value: N | None) -> N | None:
    if total is None or value is None:
        return None
    return total + value
