"""The engine that follows a scripted policy deterministically: pure, no I/O, seeded."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from society_sandbox.runtimes.scripted import (
    ACCEPT,
    PROPOSE,
    REJECT,
    ReplyDelay,
    Rule,
    ScriptedPolicy,
)

_VERB = re.compile(r"^(PROPOSE|ACCEPT|REJECT) (.+)$", re.DOTALL)


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
