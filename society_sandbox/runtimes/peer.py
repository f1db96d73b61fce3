"""What a peer's policy function is given and may return; the one module policy authors import.

A policy is a plain function of what the peer has received::

    from society_sandbox.runtimes.peer import Decision, Received, Say

    def respond(received: Received) -> Decision | Say | str | None:
        if received.latest is None:              # called once at start, before any delivery
            return Say("hello", to=("bob",))      # opens a conversation with bob
        return f"heard {len(received.messages)}"  # a reply in the latest message's conversation

It may be ``async def``. It runs in the peer's own sandbox; the controller only reads it. What it
returns in ``Decision.publish`` is what the peer's bridge shows the program, beside the
runtime's own counters; nothing the program does through the bridge makes the peer send.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PEER_CONFIG_FILE = "peer.json"
"""Where the descriptor writes the peer's settings, relative to its working directory."""


class PeerSettings(BaseModel):
    """The descriptor's choices, as the program reads them from ``peer.json``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    module: str
    """The policy module's path in the working directory (one of the descriptor's files)."""
    function: str
    max_sends: int = Field(default=100, ge=0)
    """The peer goes quiet after this many sends (two peers answering each other end)."""
    packages: tuple[str, ...] = ()
    """Python distributions the policy needs (PEP 508); the peer checks them before it loads it."""


MAX_SENDS_REACHED = "max-sends"
"""A peer's ``limit`` once its policy asked to say more than ``max_sends`` allows."""


class PolicyError(Exception):
    """The policy returned something a peer cannot act on; the message says what it must be."""


@dataclass(frozen=True, slots=True)
class Message:
    """One delivery: who sent it (participant name), its text, its conversation."""

    sender: str
    text: str
    conversation_id: str


@dataclass(frozen=True, slots=True)
class Received:
    """Everything the peer has received so far, oldest first, and its own name."""

    me: str
    messages: tuple[Message, ...] = ()

    @property
    def latest(self) -> Message | None:
        """The message this call answers; ``None`` on the opening call."""
        return self.messages[-1] if self.messages else None


@dataclass(frozen=True, slots=True)
class Say:
    """Send ``text``: to ``to`` (participant names; a conversation is opened once per set), or
    into ``conversation_id``, or, with neither, into the latest message's conversation."""

    text: str
    to: tuple[str, ...] = ()
    conversation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to send now, and (if not ``None``) what the peer publishes from now on."""

    say: tuple[Say, ...] = ()
    publish: Mapping[str, Any] | None = field(default=None)


def as_decision(value: object) -> Decision:
    """The policy's return value as a ``Decision``: ``None``, a ``str`` (a reply), a ``Say``, a
    sequence of ``Say``, or a ``Decision``; anything else raises ``PolicyError``."""
    if value is None:
        return Decision()
    if isinstance(value, Decision):
        decision = value
    elif isinstance(value, str):
        decision = Decision(say=(Say(value),))
    elif isinstance(value, Say):
        decision = Decision(say=(value,))
    elif isinstance(value, Sequence) and all(isinstance(item, Say) for item in value):
        decision = Decision(say=tuple(value))
    else:
        raise PolicyError(
            f"a policy returns None, a str, a Say, a list of Say or a Decision; it returned "
            f"{type(value).__name__}"
        )
    for say in decision.say:
        if not isinstance(say, Say) or not isinstance(say.text, str) or not say.text.strip():
            raise PolicyError(f"{say!r} has no text to send")
    if decision.publish is not None:
        try:
            json.dumps(dict(decision.publish))
        except (TypeError, ValueError) as exc:
            raise PolicyError(f"Decision.publish must be JSON-safe: {exc}") from None
    return decision
