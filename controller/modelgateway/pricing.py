"""What a model call costs in USD, from a table of per-token list prices.

A model the table does not know costs ``None`` (unknown), never ``0.0``: an unknown price must
stay visible in every sum it enters. The local SmolLM2 model is priced at ``0.0`` on purpose: it
runs on the controller's own CPU and no provider bills for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SMOLLM2_MODEL_ID = "smollm2-135m-instruct"
"""The id under which ``LocalModelServer`` serves the SmolLM2-135M-Instruct Q4_1 model."""


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """List price of one model, in USD per million tokens."""

    prompt_usd_per_mtok: float
    completion_usd_per_mtok: float


# Published list prices (USD per million tokens) when this table was written; providers change
# them, so a run that needs exact accounting passes its own table to ``ModelGateway(prices=...)``.
PRICES: Mapping[str, ModelPrice] = {
    SMOLLM2_MODEL_ID: ModelPrice(0.0, 0.0),  # local CPU, nobody bills for it
    "gpt-4o": ModelPrice(2.50, 10.00),
    "gpt-4o-mini": ModelPrice(0.15, 0.60),
    "gpt-4.1": ModelPrice(2.00, 8.00),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40),
}


def cost_usd(
    model: str,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    prices: Mapping[str, ModelPrice] = PRICES,
) -> float | None:
    """Cost of one call; ``None`` when the model's price or the call's token counts are unknown."""
    price = prices.get(model)
    if price is None or prompt_tokens is None or completion_tokens is None:
        return None
    return (
        prompt_tokens * price.prompt_usd_per_mtok
        + completion_tokens * price.completion_usd_per_mtok
    ) / 1_000_000
