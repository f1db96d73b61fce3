"""One conversation as the agent remembers it, bounded by its ``ContextPolicy``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from society_sandbox.runtimes.llm import PASS, ContextPolicy

OWNER = "owner"
_MIN_SENTENCE_CHARS = 20
_NAMES = r"[A-Z][A-Za-z'-]*(?:(?:,| and| &)? [A-Z][A-Za-z'-]*){0,3}"
_LABEL = re.compile(rf"^{_NAMES}:\s+")
"""A speaker label the model put in front of its reply (``Ada: ...``)."""
_ANOTHER_SPEAKER = re.compile(rf"\n\s*{_NAMES}:\s")
"""Where the model starts writing someone else's lines."""
_ASIDE = re.compile(r"^\s*\([^()]*\)\s*$")
"""A line that is only a stage direction, ``(Ben's turn)``."""

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One message in a conversation: from someone else, from the owner, or the agent's own."""

    speaker: str
    text: str
    own: bool = False

    def chat_message(self) -> tuple[Role, str]:
        if self.own:
            return "assistant", self.text
        if self.speaker == OWNER:
            return "user", f"(private note from your owner) {self.text}"
        return "user", f"{display(self.speaker)}: {self.text}"


@dataclass(slots=True)
class ConversationContext:
    """The bounded history of one conversation; counts what the policy dropped and clipped."""

    conversation_id: str
    peers: tuple[str, ...]
    policy: ContextPolicy
    turns: list[Turn] = field(default_factory=list)
    dropped: int = 0
    clipped: int = 0

    def add(self, turn: Turn) -> None:
        limit = self.policy.max_message_chars
        if len(turn.text) > limit:
            turn = Turn(turn.speaker, turn.text[: limit - 1] + "…", turn.own)
            self.clipped += 1
        self.turns.append(turn)
        excess = len(self.turns) - self.policy.keep_last_messages
        if excess > 0:
            del self.turns[:excess]
            self.dropped += excess

    def chat(self, system: str) -> list[dict[str, str]]:
        """The chat request's messages: the system prompt, then the kept history with
        consecutive same-role messages merged (chat templates expect alternating roles)."""
        messages: list[dict[str, str]] = [{"role": "system", "content": system}]
        for turn in self.turns:
            role, content = turn.chat_message()
            if messages[-1]["role"] == role and role != "system":
                messages[-1]["content"] += "\n" + content
            else:
                messages.append({"role": role, "content": content})
        if messages[-1]["role"] != "user":  # the model answers a user turn
            messages.append({"role": "user", "content": "(continue)"})
        return messages


def display(name: str) -> str:
    """A participant's name as the model reads it: ``ada`` -> ``Ada``."""
    return name[:1].upper() + name[1:]


def system_prompt(name: str, identity: str, instructions: str, peers: tuple[str, ...]) -> str:
    others = ", ".join(display(peer) for peer in peers) if peers else "the others"
    parts = [identity.strip(), instructions.strip()]
    parts.append(
        f"You are {display(name)}, chatting with {others}. Write only your own next message: "
        f"one or two short sentences. If you have nothing to add, answer {PASS}."
    )
    return "\n\n".join(part for part in parts if part)


def clean_reply(text: str, max_chars: int, *, cut_off: bool = False) -> str | None:
    """The reply to send, or ``None`` when the model passed or said nothing.

    Stage directions on lines of their own and speaker labels in front are dropped, and so is
    whatever follows a line in which the model starts speaking for someone else. A reply the
    token limit ``cut_off`` ends at its last complete sentence, when it has one.
    """
    reply = "\n".join(line for line in text.splitlines() if not _ASIDE.match(line)).strip()
    other = _ANOTHER_SPEAKER.search(reply)
    if other is not None:
        reply, cut_off = reply[: other.start()].strip(), False
    while (label := _LABEL.match(reply)) is not None:
        reply = reply[label.end() :]
    reply = reply.strip()
    if not reply or reply.rstrip(".! ").upper() == PASS:
        return None
    if cut_off:
        end = max(reply.rfind(mark) for mark in (". ", "! ", "? ", ".\n", "!\n", "?\n"))
        if end >= _MIN_SENTENCE_CHARS:
            reply = reply[: end + 1]
        elif reply[-1] not in ".!?":
            reply += "…"
    if len(reply) > max_chars:
        reply = reply[: max_chars - 1].rstrip() + "…"
    return reply
