"""Events the model gateway writes: one per model call an agent made, succeeded or failed,
what it serves when it starts, and when an agent's token budget ran out.

They carry names, counts and measurements only; never a provider key or an agent token.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ledger import Event, EventCatalog

ErrorClass = Literal["auth", "quota", "rate_limit", "network", "unknown"]
"""Why a provider call failed. ``auth`` and ``quota`` end the calling agent's model use."""

ENDS_MODEL_USE: frozenset[str] = frozenset({"auth", "quota"})

ModelUseEnd = Literal["auth", "quota", "token_budget"]
"""Why an agent's model use ended for the rest of the run."""


class AgentModelUsage(Event):
    """An agent's model call that the provider answered, as the gateway measured it.

    Token counts are the provider's ``usage`` figures; ``None`` when the provider reported none.
    ``cost_usd`` is ``None`` when the model's price (or the token counts) are unknown.
    """

    tag: ClassVar[str] = "society.agent-model-usage/v1"

    agent: str
    provider: str
    model: str
    prompt_tokens: int | None = Field(ge=0)
    completion_tokens: int | None = Field(ge=0)
    latency_ms: float = Field(ge=0)
    cost_usd: float | None = Field(ge=0)
    attempts: int = Field(ge=1)


class AgentModelCallFailed(Event):
    """An agent's model call that failed after the gateway's retries; ``detail`` holds no secret."""

    tag: ClassVar[str] = "society.agent-model-call-failed/v1"

    agent: str
    provider: str
    model: str
    error_class: ErrorClass
    status: int | None
    detail: str
    ends_model_use: bool
    latency_ms: float = Field(ge=0)
    attempts: int = Field(ge=1)


class AgentModelBudgetReached(Event):
    """An agent's token budget cannot cover another call: the first call whose worst case no
    longer fits is refused, and so is every later one, for the rest of the run.

    ``used_tokens`` is what the agent's calls were charged: each call's measured prompt +
    completion tokens, or its reserved worst case where the provider reported none; it never
    exceeds ``budget_tokens`` unless a provider reported more than a call's worst case."""

    tag: ClassVar[str] = "society.agent-model-budget-reached/v1"

    agent: str
    budget_tokens: int = Field(ge=0)
    used_tokens: int = Field(ge=0)
    calls: int = Field(ge=0)


class ServedProvider(BaseModel):
    """One provider behind the gateway: its model and the *name* of its key, never the value."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    name: str
    model: str
    base_url: str
    api_key_name: str | None
    local: bool
    """Served by the run's own local model server."""


class ModelGatewayStarted(Event):
    """The run's model gateway is up: which providers it serves, to which agents."""

    tag: ClassVar[str] = "society.model-gateway-started/v1"

    providers: list[ServedProvider]
    agents: dict[str, str]
    """Agent -> the model it was given."""


model_gateway_catalog = EventCatalog.make(
    AgentModelUsage, AgentModelCallFailed, AgentModelBudgetReached, ModelGatewayStarted
)
