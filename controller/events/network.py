"""Events the router, experiment endpoints and the link controller write.

Participants appear by router-issued id (``agent:alice``, ``endpoint:workload``). Message parts
are evidence and are recorded in full; credentials never are.

Graders read pairs: a ``RouterMessageCommitted`` whose message id no ``RouterMessagesDelivered``
of a receiver lists was committed and never delivered to it (a ``LinkMessageDropped`` says why,
when the link stage dropped it). ``delivered_pairs`` reads them, and the one-message
``RouterMessageDelivered`` of older ledgers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import ClassVar

from pydantic import Field

from ledger.events import Event, EventCatalog

# ---- router lifecycle ----------------------------------------------------------------------


class RouterStarted(Event):
    """The router listens at ``url``; agents may connect and authenticate from now on."""

    tag: ClassVar[str] = "society.router-started/v1"

    url: str
    host: str
    port: int
    tls: bool
    protocol_version: int


class RouterStartFailed(Event):
    """The router could not listen; the run cannot proceed."""

    tag: ClassVar[str] = "society.router-start-failed/v1"

    host: str
    port: int
    reason: str
    detail: str


class RouterStopped(Event):
    """The router stopped listening and closed every connection."""

    tag: ClassVar[str] = "society.router-stopped/v1"

    messages_committed: int = Field(ge=0)


class RouterStopFailed(Event):
    """Closing the listener or a connection failed; the process still releases the port."""

    tag: ClassVar[str] = "society.router-stop-failed/v1"

    reason: str
    detail: str


# ---- messages --------------------------------------------------------------------------------


class ConversationOpened(Event):
    """``opened_by`` opened a conversation; every message in it goes to all other participants."""

    tag: ClassVar[str] = "society.conversation-opened/v1"

    conversation_id: str
    opened_by: str
    participants: list[str]


class RouterMessageCommitted(Event):
    """The router accepted a message; written before it is acknowledged or delivered."""

    tag: ClassVar[str] = "society.router-message-committed/v1"

    conversation_id: str
    message_id: str
    sender_id: str
    router_sequence: int = Field(ge=1)
    parts: list[str]


class RouterMessageRefused(Event):
    """The router refused a message it could not commit (``reason``); it was never delivered.

    The message itself is not recorded (the ledger could not encode it), only who sent it where.
    """

    tag: ClassVar[str] = "society.router-message-refused/v1"

    conversation_id: str
    message_id: str
    sender_id: str
    router_sequence: int = Field(ge=1)
    reason: str
    detail: str


class RouterSendsRefused(Event):
    """``sender_id``'s sends refused over its ``MessageLimits`` since its last such record.

    ``reason`` is ``message-rate`` or ``message-volume``; the refused messages were never
    committed. One record covers at most a second of refusals, so a flood's evidence is bounded.
    """

    tag: ClassVar[str] = "society.router-sends-refused/v1"

    sender_id: str
    reason: str
    messages: int = Field(ge=1)
    bytes: int = Field(ge=0)


class RouterMessagesDelivered(Event):
    """``receiver_id`` acknowledged the delivery of each of ``message_ids``, in that order.

    One record holds the acknowledgements of one receiver that reached the router together
    (within ``DELIVERED_LINGER_SECONDS`` of each other), so a delivery costs no record of its own.
    """

    tag: ClassVar[str] = "society.router-messages-delivered/v1"

    receiver_id: str
    message_ids: list[str] = Field(min_length=1)


class RouterMessageDelivered(Event):
    """``receiver_id`` acknowledged the delivery of ``message_id``.

    What routers wrote before ``RouterMessagesDelivered``; kept so that their ledgers still read.
    """

    tag: ClassVar[str] = "society.router-message-delivered/v1"

    message_id: str
    receiver_id: str


def delivered_pairs(events: Iterable[Event]) -> Iterator[tuple[str, str]]:
    """Every ``(message_id, receiver_id)`` acknowledged in ``events``, in ledger order."""
    for event in events:
        if isinstance(event, RouterMessagesDelivered):
            for message_id in event.message_ids:
                yield message_id, event.receiver_id
        elif isinstance(event, RouterMessageDelivered):
            yield event.message_id, event.receiver_id


# ---- experiment endpoints ------------------------------------------------------------------


class EndpointOpened(Event):
    """The program created an experiment-controlled endpoint in the controller process."""

    tag: ClassVar[str] = "society.endpoint-opened/v1"

    endpoint_id: str
    name: str


class EndpointClosed(Event):
    """The endpoint's scope ended; it sends and receives nothing more."""

    tag: ClassVar[str] = "society.endpoint-closed/v1"

    endpoint_id: str


class EndpointMessageSent(Event):
    """An endpoint sent ``message_id`` (already committed by the router)."""

    tag: ClassVar[str] = "society.endpoint-message-sent/v1"

    endpoint_id: str
    conversation_id: str
    message_id: str


class EndpointMessageReceived(Event):
    """The program took ``message_id`` from an endpoint's receive stream."""

    tag: ClassVar[str] = "society.endpoint-message-received/v1"

    endpoint_id: str
    conversation_id: str
    message_id: str
    sender_id: str


# ---- links: control ------------------------------------------------------------------------


class LinkDown(Event):
    """Deliveries from ``sender_id`` to ``receiver_id`` are dropped from now on (``disable``)."""

    tag: ClassVar[str] = "society.link-down/v1"

    sender_id: str
    receiver_id: str


class LinkUp(Event):
    """The last ``disable`` scope on the pair ended; the link is up again."""

    tag: ClassVar[str] = "society.link-up/v1"

    sender_id: str
    receiver_id: str


class LinkPolicySet(Event):
    """A named policy was installed on one directed pair (``delay``, ``hold`` or ``shape``)."""

    tag: ClassVar[str] = "society.link-policy-set/v1"

    sender_id: str
    receiver_id: str
    policy_id: str
    description: str


class LinkPolicyCleared(Event):
    """The policy ``policy_id`` was removed from its pair."""

    tag: ClassVar[str] = "society.link-policy-cleared/v1"

    sender_id: str
    receiver_id: str
    policy_id: str


# ---- links: consequence --------------------------------------------------------------------


class LinkMessageDropped(Event):
    """One delivery reached its receiver's link stage and was discarded; it is never delivered.

    ``reason`` is the dropping policy's reason, ``link-down`` for ``disable``,
    ``receiver-overflow`` when the receiver's bounded queue was full, or ``sender-share`` when
    the sender already held its share of that queue.
    """

    tag: ClassVar[str] = "society.link-message-dropped/v1"

    message_id: str
    sender_id: str
    receiver_id: str
    reason: str


class LinkMessageDelayed(Event):
    """One delivery was deferred by the summed delay of the pair's chain before delivery."""

    tag: ClassVar[str] = "society.link-message-delayed/v1"

    message_id: str
    sender_id: str
    receiver_id: str
    total_seconds: float = Field(ge=0)


class LinkMessageHeld(Event):
    """One delivery was parked until a policy on its pair cleared (then re-evaluated)."""

    tag: ClassVar[str] = "society.link-message-held/v1"

    message_id: str
    sender_id: str
    receiver_id: str


network_events = EventCatalog.make(
    RouterStarted,
    RouterStartFailed,
    RouterStopped,
    RouterStopFailed,
    ConversationOpened,
    RouterMessageCommitted,
    RouterMessageRefused,
    RouterSendsRefused,
    RouterMessagesDelivered,
    RouterMessageDelivered,
    EndpointOpened,
    EndpointClosed,
    EndpointMessageSent,
    EndpointMessageReceived,
    LinkDown,
    LinkUp,
    LinkPolicySet,
    LinkPolicyCleared,
    LinkMessageDropped,
    LinkMessageDelayed,
    LinkMessageHeld,
)
"""Every event the network layer writes."""
