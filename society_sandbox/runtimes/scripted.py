"""The scripted policy as data (the engine that follows it is ``agent_images/scripted/engine.py``).

A policy is a list of reply rules (first match wins), conversations the agent opens itself, the
offers it proposes, the offers it accepts, how often it stays silent, and the delays before it
speaks. Every choice is drawn from one RNG seeded with the run seed and the agent's name, and
messages are handled one at a time in delivery order, so the same seed and the same deliveries
give the same replies.

Negotiation uses three plain-text verbs: ``PROPOSE <offer>``, ``ACCEPT <offer>``,
``REJECT <offer>``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

POLICY_FILE = "policy.json"
"""Where the descriptor writes the policy, relative to the agent's working directory."""

OWNER = "owner"
"""The sender name under which gateway instructions reach the rules."""

PROPOSE, ACCEPT, REJECT = "PROPOSE", "ACCEPT", "REJECT"
ADDRESSED_PROPOSAL = r"(?m)^(?>[^\n]*?@{me}\b)[^\n]*?\bpropos"
"""``@{me}``, then later on the same line a word starting 'propos' (as ``@{me}\b.*\bpropos``).

Linear in the text: each line is tried once from its start, the first ``@{me}`` is taken for
good (an atomic group: a later one could only see less of the line), and the rest of the line
is scanned once. The plain form retried ``.*`` from every ``@{me}``: one 32 KiB part of them
took 1.9 s.
"""


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplyDelay(_Data):
    """Wait a seeded uniform time in ``[min_ms, max_ms]`` before sending."""

    min_ms: int = Field(default=0, ge=0)
    max_ms: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ReplyDelay:
        if self.max_ms < self.min_ms:
            raise ValueError(f"delay max_ms {self.max_ms} is below min_ms {self.min_ms}")
        return self


Action = Literal["say", "propose", "consider", "ignore", "stop"]


class Rule(_Data):
    """One reply rule. The first rule whose ``match`` and ``senders`` fit a message decides.

    ``match`` is a regular expression searched in the message text; ``{me}`` in it stands for the
    agent's own name. Actions: ``say`` one of ``texts`` (seeded choice; templates may use
    ``{me}``, ``{sender}``, ``{text}``, ``{count}``), ``propose`` the next of the policy's
    ``offers``, ``consider`` an incoming ``PROPOSE <offer>`` (accept, counter or reject),
    ``ignore`` it, or ``stop`` the agent (it exits cleanly). Replies go to the message's
    conversation, or to a conversation with ``peers`` when given (needed for instructions).
    """

    match: str = ""
    senders: tuple[str, ...] = ()
    action: Action = "say"
    texts: tuple[str, ...] = ()
    peers: tuple[str, ...] = ()
    delay: ReplyDelay | None = None
    limit: int | None = Field(default=None, ge=1)
    """Fire at most this many times; after that the rule no longer matches."""

    @model_validator(mode="after")
    def _says_something(self) -> Rule:
        if self.action == "say" and not self.texts:
            raise ValueError("a 'say' rule needs at least one text")
        try:
            re.compile(self.match.replace("{me}", "me"))
        except re.error as exc:
            raise ValueError(
                f"rule match {self.match!r} is not a regular expression: {exc}"
            ) from None
        return self


class Opening(_Data):
    """A conversation the agent opens by itself once the program is dispatched."""

    peers: tuple[str, ...] = Field(min_length=1)
    text: str
    delay: ReplyDelay | None = None


class ScriptedPolicy(_Data):
    """Everything a scripted agent does, as data. See the module docstring."""

    rules: tuple[Rule, ...] = ()
    openings: tuple[Opening, ...] = ()
    offers: tuple[str, ...] = ()
    """What ``propose`` offers, in order; a counter-proposal takes the next one."""
    accepts: tuple[str, ...] = ()
    """Offers ``consider`` accepts at once."""
    concede_after: int | None = Field(default=None, ge=0)
    """``consider`` accepts any offer once it has turned down this many."""
    silence: float = Field(default=0.0, ge=0.0, le=1.0)
    """Seeded probability of leaving a matched message unanswered."""
    delay: ReplyDelay = ReplyDelay()
    """Default wait before every send."""
    max_sends: int | None = Field(default=None, ge=0)
    """Go quiet after this many sends."""

    @classmethod
    def negotiator(
        cls,
        *,
        offers: tuple[str, ...] = (),
        accepts: tuple[str, ...] = (),
        concede_after: int | None = None,
        delay: ReplyDelay | None = None,
        silence: float = 0.0,
    ) -> ScriptedPolicy:
        """Propose when addressed as ``@name`` with the word 'propos', consider every proposal."""
        return cls(
            rules=(
                Rule(match=rf"^(?:{ACCEPT}|{REJECT}) ", action="ignore"),
                Rule(match=rf"^{PROPOSE} ", action="consider"),
                Rule(match=ADDRESSED_PROPOSAL, action="propose"),
            ),
            offers=offers,
            accepts=accepts,
            concede_after=concede_after,
            delay=delay or ReplyDelay(),
            silence=silence,
        )
