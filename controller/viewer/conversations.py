"""A run's messages as its ledger records them: each message in full, grouped per conversation,
with what became of it on the way to each receiver.

One reading for every viewer of messages: the agent transcripts of an evaluation log
(``transcripts``) and ``society ledger show --messages``. Records are read in ledger order, in
wire form (camelCase fields); a ledger shown as found, unverified, may hold anything, so a record
whose fields have the wrong types is skipped, never trusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OPENED = "society.conversation-opened/v1"
COMMITTED = "society.router-message-committed/v1"
REFUSED = "society.router-message-refused/v1"
DELIVERED = "society.router-messages-delivered/v1"
DELIVERED_ONE = "society.router-message-delivered/v1"
"""What routers wrote before ``DELIVERED``: one acknowledgement per record."""
DROPPED = "society.link-message-dropped/v1"
DELAYED = "society.link-message-delayed/v1"
HELD = "society.link-message-held/v1"
ENDPOINT_SENT = "society.endpoint-message-sent/v1"
ENDPOINT_RECEIVED = "society.endpoint-message-received/v1"


@dataclass(frozen=True, slots=True)
class Message:
    sequence: int
    message_id: str
    conversation_id: str
    sender: str
    text: str
    observed_at: str


@dataclass(frozen=True, slots=True)
class Fate:
    """What one record says became of a message on its way to ``receiver``.

    ``kind`` is ``delivered`` (the receiver acknowledged it), ``dropped`` (with the link's
    ``reason``), ``delayed`` (by ``seconds``), ``held``, or ``taken`` (the program took it from
    the endpoint ``receiver``).
    """

    kind: str
    receiver: str
    record: int
    elapsed_nanos: int | None
    observed_at: str
    reason: str | None = None
    seconds: float | None = None


@dataclass(slots=True)
class MessageTrail:
    """One message and every record about it: its commit (or refusal), then its fates."""

    message: Message
    parts: list[str]
    record: int
    elapsed_nanos: int | None
    refusal: tuple[str, str] | None = None
    """``(reason, detail)`` when the router refused it: its text was never recorded."""
    fates: list[Fate] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Conversation:
    conversation_id: str
    opened_by: str | None = None
    participants: list[str] = field(default_factory=list)
    messages: list[MessageTrail] = field(default_factory=list)

    def unreached(self, trail: MessageTrail) -> list[str]:
        """The participants other than its sender that no record says it was delivered to or
        dropped on the way to (in flight when the ledger ends, or held or delayed past it)."""
        settled = {f.receiver for f in trail.fates if f.kind in ("delivered", "dropped")}
        return [p for p in self.participants if p != trail.message.sender and p not in settled]


_FATES = {DROPPED: "dropped", DELAYED: "delayed", HELD: "held"}


class MessageBook:
    """Folds ledger records, in order, into conversations and their messages."""

    def __init__(self) -> None:
        self.conversations: dict[str, Conversation] = {}
        self.messages: dict[str, MessageTrail] = {}

    @classmethod
    def of_rows(cls, rows: Iterable[Mapping[str, Any]]) -> MessageBook:
        """The book of envelopes in wire form (``RecordEnvelope.to_wire()`` or a line as found)."""
        book = cls()
        for row in rows:
            event = row.get("event")
            if isinstance(event, Mapping):
                book.add(
                    str(event.get("tag")),
                    event,
                    record=_int(row.get("logicalSequence"), -1),
                    elapsed_nanos=_int(row.get("elapsedNanos")),
                    observed_at=str(row.get("observedAt", "")),
                )
        return book

    def add(
        self,
        tag: str,
        event: Mapping[str, Any],
        *,
        record: int,
        elapsed_nanos: int | None,
        observed_at: str,
    ) -> None:
        """Read one record; a record about no message, or of the wrong shape, changes nothing."""
        if tag == OPENED:
            self._opened(event)
        elif tag in (COMMITTED, REFUSED):
            self._committed(tag, event, record, elapsed_nanos, observed_at)
        elif tag in (DELIVERED, DELIVERED_ONE):
            receiver = _str(event, "receiverId")
            ids = event.get("messageIds") if tag == DELIVERED else [event.get("messageId")]
            if receiver is not None and isinstance(ids, list):
                for message_id in ids:
                    delivered = Fate("delivered", receiver, record, elapsed_nanos, observed_at)
                    self._fate(tag, message_id, delivered)
        elif tag in _FATES:
            receiver = _str(event, "receiverId")
            seconds = event.get("totalSeconds")
            if receiver is not None:
                fate = Fate(
                    _FATES[tag],
                    receiver,
                    record,
                    elapsed_nanos,
                    observed_at,
                    reason=_str(event, "reason"),
                    seconds=float(seconds) if isinstance(seconds, int | float) else None,
                )
                self._fate(tag, event.get("messageId"), fate)
        elif tag == ENDPOINT_RECEIVED:
            endpoint = _str(event, "endpointId")
            if endpoint is not None:
                taken = Fate("taken", endpoint, record, elapsed_nanos, observed_at)
                self._fate(tag, event.get("messageId"), taken)
        elif tag == ENDPOINT_SENT:
            trail = self.messages.get(str(event.get("messageId")))
            if trail is not None:
                trail.tags.add(tag)

    def message_ids_of(self, event: Mapping[str, Any]) -> list[str]:
        """The ids of the messages a record is about (``messageId`` or ``messageIds``)."""
        ids = event.get("messageIds")
        found = ids if isinstance(ids, list) else [event.get("messageId")]
        return [i for i in found if isinstance(i, str) and i in self.messages]

    def _opened(self, event: Mapping[str, Any]) -> None:
        conversation_id = _str(event, "conversationId")
        participants = event.get("participants")
        if conversation_id is None or not isinstance(participants, list):
            return
        conversation = self._conversation(conversation_id)
        conversation.opened_by = _str(event, "openedBy")
        conversation.participants = [p for p in participants if isinstance(p, str)]

    def _committed(
        self,
        tag: str,
        event: Mapping[str, Any],
        record: int,
        elapsed_nanos: int | None,
        observed_at: str,
    ) -> None:
        conversation_id, message_id, sender = (
            _str(event, key) for key in ("conversationId", "messageId", "senderId")
        )
        sequence = event.get("routerSequence")
        parts = event.get("parts", [])
        if (
            conversation_id is None
            or message_id is None
            or sender is None
            or not isinstance(sequence, int)
            or not isinstance(parts, list)
            or not all(isinstance(part, str) for part in parts)
        ):
            return
        text = "\n".join(parts)
        message = Message(sequence, message_id, conversation_id, sender, text, observed_at)
        trail = MessageTrail(message, list(parts), record, elapsed_nanos, tags={tag})
        if tag == REFUSED:
            trail.refusal = (str(event.get("reason", "?")), str(event.get("detail", "")))
        self.messages[message_id] = trail
        self._conversation(conversation_id).messages.append(trail)

    def _fate(self, tag: str, message_id: object, fate: Fate) -> None:
        trail = self.messages.get(message_id) if isinstance(message_id, str) else None
        if trail is not None:
            trail.fates.append(fate)
            trail.tags.add(tag)

    def _conversation(self, conversation_id: str) -> Conversation:
        found = self.conversations.get(conversation_id)
        if found is None:
            found = self.conversations[conversation_id] = Conversation(conversation_id)
        return found


def _str(event: Mapping[str, Any], key: str) -> str | None:
    value = event.get(key)
    return value if isinstance(value, str) else None


def _int(value: object, default: int | None = None) -> Any:
    """``value`` when it is an integer (not a bool), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default
