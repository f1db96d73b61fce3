"""Conversations for a terminal (``society ledger show --messages``) and for scripts (``--json``).

Every message is shown in full: its text comes from agents and is untrusted, so each of its
lines is escaped for the terminal (``terminal_safe``), as is every name and reason beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from controller.viewer.conversations import Conversation, Fate, MessageTrail
from ledger.terminal import terminal_json, terminal_safe
from ledger.timeline import BOLD, DIM, GREEN, RED, YELLOW, TimelineStyle, elapsed_text

_INDENT = " " * 6
_COLORS = {"delivered": GREEN, "taken": GREEN, "dropped": RED, "delayed": YELLOW, "held": YELLOW}


def conversation_lines(
    conversations: Iterable[Conversation], style: TimelineStyle
) -> Iterator[str]:
    """Each conversation's heading, then each message: time, record, id, sender, its full text,
    and what became of it on the way to each receiver."""
    for conversation in conversations:
        yield _heading(conversation, style)
        for trail in conversation.messages:
            yield ""
            yield from _message_lines(conversation, trail, style)
        yield ""


def message_counts_line(conversations: Iterable[Conversation]) -> str:
    """``12 messages in 1 conversation · delivered 30 · dropped 6``."""
    listed = list(conversations)
    messages = sum(len(c.messages) for c in listed)
    fates = Counter(fate.kind for c in listed for trail in c.messages for fate in trail.fates)
    counts = [f"{kind} {count:,}" for kind, count in sorted(fates.items())]
    head = f"{_plural(messages, 'message')} in {_plural(len(listed), 'conversation')}"
    return " · ".join([head, *counts])


def message_objects(conversations: Iterable[Conversation]) -> Iterator[dict[str, Any]]:
    """One JSON object per message: its fields, its fate on the way to each receiver, and the
    participants no record says it reached."""
    for conversation in conversations:
        for trail in conversation.messages:
            message, refusal = trail.message, trail.refusal
            refused = None if refusal is None else {"reason": refusal[0], "detail": refusal[1]}
            yield {
                "conversationId": message.conversation_id,
                "messageId": message.message_id,
                "routerSequence": message.sequence,
                "record": trail.record,
                "elapsedNanos": trail.elapsed_nanos,
                "observedAt": message.observed_at,
                "sender": message.sender,
                "text": message.text,
                "parts": trail.parts,
                "refused": refused,
                "fates": [_fate_object(fate) for fate in trail.fates],
                "unreached": conversation.unreached(trail),
            }


def message_json_lines(conversations: Iterable[Conversation]) -> Iterator[str]:
    """``message_objects`` as JSON lines, control and bidi characters escaped."""
    return (terminal_json(value) for value in message_objects(conversations))


def _heading(conversation: Conversation, style: TimelineStyle) -> str:
    parts = [f"{style.paint('conversation', BOLD)} {terminal_safe(conversation.conversation_id)}"]
    if conversation.opened_by is not None:
        parts.append(f"opened by {terminal_safe(conversation.opened_by)}")
    if conversation.participants:
        parts.append("participants " + terminal_safe(", ".join(conversation.participants)))
    return " · ".join(parts)


def _message_lines(
    conversation: Conversation, trail: MessageTrail, style: TimelineStyle
) -> Iterator[str]:
    message = trail.message
    when = style.paint(f"{elapsed_text(trail.elapsed_nanos):>11}", DIM)
    record = style.paint(f"#{trail.record}", DIM)
    sender = style.paint(terminal_safe(message.sender), BOLD)
    yield f"{when}  {record}  {terminal_safe(message.message_id)}  {sender}"
    if trail.refusal is not None:
        reason, detail = (terminal_safe(text) for text in trail.refusal)
        verdict = style.paint(f"refused by the router ({reason})", RED)
        yield f"{_INDENT}{verdict}: {detail} (its text was not recorded)"
    else:
        for line in message.text.split("\n"):
            yield f"{_INDENT}{style.paint('│', DIM)} {terminal_safe(line)}"
    delivered = [fate for fate in trail.fates if fate.kind == "delivered"]
    if delivered:
        yield _fate_line("delivered", ", ".join(map(_receiver_at, delivered)), style)
    for fate in trail.fates:
        if fate.kind in ("dropped", "delayed", "held"):
            yield _fate_line(fate.kind, _link_fate(fate), style)
    taken = [fate for fate in trail.fates if fate.kind == "taken"]
    if taken:
        yield _fate_line("taken", ", ".join(map(_receiver_at, taken)) + " (by the program)", style)
    unreached = conversation.unreached(trail)
    if unreached and trail.refusal is None:
        receivers = terminal_safe(", ".join(unreached))
        yield _fate_line("unreached", f"{receivers} (no record of a delivery or a drop)", style)


def _fate_line(kind: str, text: str, style: TimelineStyle) -> str:
    return f"{_INDENT}{style.paint(f'{kind:<10}', _COLORS.get(kind, DIM))} {text}"


def _receiver_at(fate: Fate) -> str:
    return f"{terminal_safe(fate.receiver)} {elapsed_text(fate.elapsed_nanos)}"


def _link_fate(fate: Fate) -> str:
    """``agent:ann +1.450s #57: link-down`` for a drop, ``... by 0.5 s`` for a delay."""
    text = f"{_receiver_at(fate)} #{fate.record}"
    if fate.kind == "dropped":
        return f"{text}: {terminal_safe(fate.reason or '?')}"
    if fate.kind == "delayed" and fate.seconds is not None:
        return f"{text}: by {fate.seconds:g} s"
    return f"{text}: until a policy on the link cleared"


def _fate_object(fate: Fate) -> dict[str, Any]:
    value: dict[str, Any] = {
        "kind": fate.kind,
        "receiver": fate.receiver,
        "record": fate.record,
        "elapsedNanos": fate.elapsed_nanos,
        "observedAt": fate.observed_at,
    }
    if fate.reason is not None:
        value["reason"] = fate.reason
    if fate.seconds is not None:
        value["seconds"] = fate.seconds
    return value


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'s' * (count != 1)}"
