"""The ``llm`` agent's configuration, as data: budgets, context policy, reply policy.

The controller-side descriptor writes it to ``llm.json`` in the agent's working directory, next
to ``IDENTITY.md`` (who the agent is) and ``INSTRUCTIONS.md`` (what it should do); the agent
program reads all three at start. Shared by both sides, so it imports only pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

CONFIG_FILE = "llm.json"
IDENTITY_FILE = "IDENTITY.md"
INSTRUCTIONS_FILE = "INSTRUCTIONS.md"
TRANSCRIPT_FILE = "transcript.jsonl"
"""One line per model call the agent made: what it decided and what it was told it used."""

GATEWAY_URL_VARIABLE = "MODEL_GATEWAY_URL"
"""The run's model gateway (OpenAI-compatible base URL, up to ``/v1``); set by the controller."""
GATEWAY_SOCKET_VARIABLE = "MODEL_GATEWAY_SOCKET"
"""Local sandbox only: the Unix socket the gateway is reached through (the URL names the host)."""
MODEL_VARIABLE = "MODEL_NAME"
"""The model id the gateway serves this agent."""
GATEWAY_TOKEN_CREDENTIAL = "MODEL_GATEWAY_TOKEN"
"""The agent's per-run gateway token, in its secrets file (never its environment)."""

PASS = "PASS"
"""What the model answers when it decides not to reply."""


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class Budget(_Model):
    """When the agent stops by itself. A turn is one model call."""

    max_turns: int = Field(default=8, ge=1)
    max_tokens: int = Field(default=6000, ge=1)
    """Prompt + completion tokens, as the gateway measured them; the gateway enforces it too."""
    max_wall_s: float = Field(default=600.0, gt=0)
    """Seconds from the first message or instruction the agent received."""


class ContextPolicy(_Model):
    """How the history of one conversation is bounded before it goes to the model.

    ``keep-last``: the newest ``keep_last_messages`` messages are kept, older ones are dropped
    (not summarized); each message is clipped to ``max_message_chars`` characters.
    """

    truncation: Literal["keep-last"] = "keep-last"
    keep_last_messages: int = Field(default=8, ge=1)
    max_message_chars: int = Field(default=400, ge=16)

    def describe(self) -> str:
        return (
            f"keep the last {self.keep_last_messages} messages of each conversation, older ones "
            f"dropped without summary; each clipped to {self.max_message_chars} characters"
        )


class ReplyPolicy(_Model):
    """When the agent asks the model for a reply, and how long a reply may be.

    ``any``: after new messages from others; ``mentions``: only when a message names the agent.
    Owner instructions always get a turn. The model declines by answering ``PASS``.
    """

    reply_to: Literal["any", "mentions"] = "any"
    max_reply_tokens: int = Field(default=64, ge=1, le=1024)
    max_reply_chars: int = Field(default=400, ge=16)
    temperature: float = Field(default=0.7, ge=0, le=2)
    pause_s: float = Field(default=0.0, ge=0)
    """Waited before each turn, so that messages arriving together are answered together."""


class LLMConfig(_Model):
    """Everything an ``llm`` agent is configured with, besides its identity and instructions."""

    budget: Budget = Budget()
    context: ContextPolicy = ContextPolicy()
    reply: ReplyPolicy = ReplyPolicy()
