"""A model provider as a run declares it: where it is, which model, and the *name* of its key.

Kept free of httpx so that runtime descriptors can name providers without loading a client.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from controller.errors import ModelGatewayError


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """An OpenAI-compatible provider. ``api_key_name`` names the credential; the key never
    appears here.

    ``max_concurrency`` calls run at once and successive calls start at least ``min_interval_s``
    apart; one attempt may take ``timeout_s``; 429, 5xx and network errors are retried up to
    ``max_attempts`` attempts in all, with exponential backoff from ``backoff_initial_s``.
    """

    name: str
    base_url: str  # up to and including /v1
    model: str
    api_key_name: str | None = None
    max_concurrency: int = 4
    min_interval_s: float = 0.0
    timeout_s: float = 120.0
    max_attempts: int = 4
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 8.0
    max_completion_tokens: int = 4096
    """The most ``max_tokens`` an agent's call is forwarded with (a larger one is lowered)."""
    limit_field: str | None = None
    """The one completion-limit field the provider honours, if it ignores the other: the
    forwarded limit is also written there (llama.cpp's server reads ``max_tokens`` only, and
    generated until its context was full for a call that sent ``max_completion_tokens``)."""
    api: Literal["openai-chat", "anthropic-messages"] = "openai-chat"
    """What the provider speaks: OpenAI chat completions (``base_url`` up to ``/v1``), or
    Anthropic Messages (``base_url`` up to ``/v1``; the key goes as ``x-api-key``), to which the
    gateway writes each call (``anthropic_provider``)."""


NAMED_PROVIDERS: dict[str, ProviderConfig] = {
    "openai": ProviderConfig(
        name="openai",
        base_url="https://api.openai.com/v1",
        model="gpt-4o-mini",
        api_key_name="OPENAI_API_KEY",
    ),
}
"""Providers a runtime may choose by name; the key's value is read from the controller's
environment under ``api_key_name`` when the run's gateway starts."""


class UnknownProviderError(ModelGatewayError, ValueError):
    """A provider name that ``NAMED_PROVIDERS`` does not hold; ``reason`` is machine-readable."""

    reason = "unknown-provider"


def named_provider(name: str, model: str | None = None) -> ProviderConfig:
    """The provider called ``name`` (see ``NAMED_PROVIDERS``), serving ``model`` if given."""
    try:
        provider = NAMED_PROVIDERS[name]
    except KeyError:
        known = ", ".join(["local", *NAMED_PROVIDERS])
        raise UnknownProviderError(
            f"no provider named {name!r}; choose one of {known}, or pass a ProviderConfig"
        ) from None
    return provider if model is None else replace(provider, model=model)
