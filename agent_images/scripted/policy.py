"""The scripted policy as data, and the engine that follows it deterministically.

A policy is a list of reply rules (first match wins), conversations the agent opens itself, the
offers it proposes, the offers it accepts, how often it stays silent, and the delays before it
speaks. Every choice is drawn from one RNG seeded with the run seed and the agent's name, and
messages are handled one at a time in delivery order, so the same seed and the same deliveries
give the same replies.

Negotiation uses three plain-text verbs: ``PROPOSE <offer>``, ``ACCEPT <offer>``,
``REJECT <offer>``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
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
_VERB = re.compile(r"^(PROPOSE|ACCEPT|REJECT) (.+)$", re.DOTALL)


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


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message as the policy sees it: a delivery, or an owner instruction (no conversation)."""

    sender: str
    text: str
    conversation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message the policy decided to send: into ``conversation_id``, or to ``peers``."""

    text: str
    delay_s: float
    conversation_id: str | None = None
    peers: tuple[str, ...] = ()


@dataclass(slots=True)
class Reaction:
    sends: list[Outgoing] = field(default_factory=list)
    stop: bool = False


class PolicyEngine:
    """Follows one ``ScriptedPolicy`` for the agent ``name``; pure, no I/O, seeded."""

    def __init__(self, policy: ScriptedPolicy, *, name: str, seed: int) -> None:
        self.policy = policy
        self.name = name
        self.rng = random.Random(f"{seed}/{name}")
        self.sent = 0
        self.received = 0
        self.offers_made: list[str] = []
        self.accepted: list[str] = []
        self.rejected = 0
        self._next_offer = 0
        self._fired: dict[int, int] = {}
        self._patterns = [
            re.compile(rule.match.replace("{me}", re.escape(name))) for rule in policy.rules
        ]

    def openings(self) -> list[Outgoing]:
        sends = [
            Outgoing(opening.text, self._delay(opening.delay), peers=opening.peers)
            for opening in self.policy.openings
        ]
        return self._budget(sends)

    def decide(self, message: Incoming) -> Reaction:
        """What to do about one message; call in delivery order."""
        if message.sender == self.name:
            return Reaction()
        self.received += 1
        for index, rule in enumerate(self.policy.rules):
            if rule.senders and message.sender not in rule.senders:
                continue
            if rule.limit is not None and self._fired.get(index, 0) >= rule.limit:
                continue
            if not self._patterns[index].search(message.text):
                continue
            self._fired[index] = self._fired.get(index, 0) + 1
            return self._act(rule, message)
        return Reaction()

    def state(self) -> dict[str, object]:
        return {
            "sent": self.sent,
            "received": self.received,
            "offersMade": list(self.offers_made),
            "accepted": list(self.accepted),
            "rejected": self.rejected,
        }

    def _act(self, rule: Rule, message: Incoming) -> Reaction:
        if rule.action == "ignore":
            return Reaction()
        if rule.action == "stop":
            return Reaction(stop=True)
        if self.policy.silence and self.rng.random() < self.policy.silence:
            return Reaction()
        text = self._text(rule, message)
        if text is None:
            return Reaction()
        peers = rule.peers
        conversation = None if peers else message.conversation_id
        if conversation is None and not peers:
            return Reaction()  # an instruction with nowhere to answer
        return Reaction(
            self._budget([Outgoing(text, self._delay(rule.delay), conversation, peers)])
        )

    def _text(self, rule: Rule, message: Incoming) -> str | None:
        if rule.action == "say":
            template = rule.texts[self.rng.randrange(len(rule.texts))]
            return _fill(template, self._vars(message))
        if rule.action == "propose":
            return self._propose()
        verb = _VERB.match(message.text.strip())
        if verb is None or verb.group(1) != PROPOSE:
            return None
        offer = verb.group(2).strip()
        concede = self.policy.concede_after
        if offer in self.policy.accepts or (concede is not None and self.rejected >= concede):
            self.accepted.append(offer)
            return f"{ACCEPT} {offer}"
        self.rejected += 1
        return self._propose() or f"{REJECT} {offer}"

    def _propose(self) -> str | None:
        if self._next_offer >= len(self.policy.offers):
            return None
        offer = self.policy.offers[self._next_offer]
        self._next_offer += 1
        self.offers_made.append(offer)
        return f"{PROPOSE} {offer}"

    def _vars(self, message: Incoming) -> dict[str, object]:
        return {"me": self.name, "sender": message.sender, "text": message.text, "count": self.sent}

    def _delay(self, delay: ReplyDelay | None) -> float:
        window = delay or self.policy.delay
        if window.max_ms == 0:
            return 0.0
        return self.rng.uniform(window.min_ms, window.max_ms) / 1000.0

    def _budget(self, sends: list[Outgoing]) -> list[Outgoing]:
        limit = self.policy.max_sends
        if limit is not None:
            sends = sends[: max(0, limit - self.sent)]
        self.sent += len(sends)
        return sends


class _Keep(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _fill(template: str, values: Mapping[str, object]) -> str:
    return template.format_map(_Keep(values))
