"""Events the model gateway writes: one per model call an agent made, succeeded or failed.

They carry names, counts and measurements only; never a provider key or an agent token.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ledger import Event, EventCatalog

ErrorClass = Literal["auth", "quota", "rate_limit", "network", "unknown"]
"""Why a provider call failed. ``auth`` and ``quota`` end the calling agent's model use."""

ENDS_MODEL_USE: frozenset[str] = frozenset({"auth", "quota"})


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


model_gateway_catalog = EventCatalog.make(AgentModelUsage, AgentModelCallFailed)
