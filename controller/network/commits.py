"""The router's commit stage: each accepted send becomes durable, then goes on in sequence order.

A send is queued for the ledger's next group commit (``LedgerWriter.append_soon``) without a task
or a wait; once its batch is fsynced the ledger calls back, in record order. Only then is the
message acknowledged to its sender and released to the delivery stage (``fabric``), in
router-sequence order, so nothing is delivered or acknowledged before it is durable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from controller.events.network import RouterMessageCommitted, RouterMessageRefused
from controller.network.fabric import Fabric, Message
from controller.network.idempotency import (
    Once,
    OnceKey,
    SettledSend,
    claim,
    once_key,
    send_fingerprint,
    settled_send,
)
from ledger.errors import LedgerEncodingError, LedgerError
from ledger.records import Record
from ledger.writer import AppendOutcome, LedgerWriter
from society_sandbox.network.errors import NetworkError
from society_sandbox.network.protocol import Delivery, Participant, SendAck

_log = logging.getLogger("controller.network.router")

SendOutcome = Callable[[SendAck | NetworkError], None]
"""Called once with a send's ack, or with the typed refusal that replaced it."""


class MessageCommits:
    """Numbers, commits and releases the router's messages."""

    def __init__(
        self, ledger: LedgerWriter, fabric: Fabric, once: dict[OnceKey, Once | SettledSend]
    ) -> None:
        self.ledger = ledger
        self.fabric = fabric
        self.sequence = 0
        """Router sequence numbers handed out so far."""
        self._once = once
        self._released = 0
        self._committed: dict[int, Message | None] = {}
        self._hold_after: int | None = None
        self._hold_reached: anyio.Event | None = None

    def accept(
        self,
        sender: Participant,
        conversation_id: str,
        participants: tuple[Participant, ...],
        parts: tuple[str, ...],
        *,
        client_message_id: str | None,
        then: SendOutcome,
    ) -> None:
        """Queue one checked send for the next group commit; ``then`` gets its outcome.

        A retry of a send (same client message id) gets the first one's outcome, whether that
        is settled already or still in flight; a reused id with other content raises
        ``NetworkError`` (``client-message-id-conflict``).
        """
        once, fresh = claim(
            self._once,
            "send",
            sender.id,
            client_message_id,
            None if client_message_id is None else send_fingerprint(conversation_id, parts),
        )
        once.when_settled(then)
        if not fresh:
            return
        self.sequence += 1
        sequence = self.sequence
        event = RouterMessageCommitted(
            conversation_id=conversation_id,
            message_id=f"m-{sequence}",
            sender_id=sender.id,
            router_sequence=sequence,
            parts=list(parts),
        )
        committed = _CommittedSend(
            self, once, event, sender, participants, parts, client_message_id
        )
        try:
            self.ledger.append_soon(event, producer="router", then=committed)
        except LedgerError as exc:  # closed or failed: refused before it was queued
            committed(exc)

    def _committed_send(self, send: _CommittedSend, outcome: AppendOutcome) -> None:
        """The ledger took (or refused) one message: deliver and acknowledge it, or refuse it."""
        event = send.event
        sequence = event.router_sequence
        if not isinstance(outcome, Record):
            self._release(sequence, None)
            if isinstance(outcome, LedgerEncodingError):
                self._refuse_unencodable(event, outcome, send.once)
            else:
                send.once.settle(error=_unavailable(event, outcome))
            return
        delivery = Delivery(
            event.message_id,
            event.conversation_id,
            send.sender,
            send.participants,
            send.parts,
            sequence,
        )
        self._release(sequence, Message(delivery))
        if send.client_message_id is not None:
            key = once_key("send", send.sender.id, send.client_message_id)
            fingerprint = str(send.once.fingerprint)  # a send_fingerprint
            self._once[key] = settled_send(fingerprint, event.message_id, sequence)
        send.once.settle(SendAck(event.message_id, sequence))

    def _refuse_unencodable(
        self, event: RouterMessageCommitted, error: LedgerEncodingError, once: Once
    ) -> None:
        """Record ``RouterMessageRefused``, then refuse the send once that record is durable."""
        _log.warning("the ledger could not encode %s: %s", type(event).__name__, error)
        refused = NetworkError(
            f"the ledger could not encode {type(event).__name__}: {error}",
            reason="unencodable-message",
        )
        refused.__cause__ = error
        try:
            self.ledger.append_soon(
                refusal_of(event, error),
                producer="router",
                then=lambda _: once.settle(error=refused),
            )
        except LedgerError:  # a failed ledger keeps what it has
            once.settle(error=refused)

    def hold_after(self, at: int) -> anyio.Event:
        """Hold every message after router sequence ``at`` back from delivery (it still commits)
        until ``release_hold``; the event is set once messages 1..``at`` went to delivery.

        A fork's intervention goes between the two, so it applies exactly from message
        ``at + 1`` on. Raises ``ValueError`` when a message after ``at`` was accepted already.
        """
        if self.sequence > at:
            raise ValueError(f"the router accepted {self.sequence} messages, more than {at}")
        self._hold_after = at
        self._hold_reached = reached = anyio.Event()
        if self._released >= at:
            reached.set()
        return reached

    def release_hold(self) -> None:
        """Deliver what ``hold_after`` held back, and everything after it as it commits."""
        self._hold_after = None
        self._drain()

    def _release(self, sequence: int, message: Message | None) -> None:
        """Hand committed messages to the delivery stage in router-sequence order."""
        self._committed[sequence] = message
        self._drain()

    def _drain(self) -> None:
        held = self._hold_after
        while self._released + 1 in self._committed and (held is None or self._released < held):
            self._released += 1
            ready = self._committed.pop(self._released)
            if ready is not None:
                self.fabric.fan_out(ready, ready.delivery.participants)
        if held is not None and self._released >= held and self._hold_reached is not None:
            self._hold_reached.set()


def refusal_of(event: RouterMessageCommitted, error: Exception) -> RouterMessageRefused:
    """The record of a message the ledger could not encode."""
    return RouterMessageRefused(
        conversation_id=event.conversation_id,
        message_id=event.message_id,
        sender_id=event.sender_id,
        router_sequence=event.router_sequence,
        reason="unencodable-message",
        detail=f"{type(error).__name__}: {error}".encode("ascii", "backslashreplace").decode(),
    )


@dataclass(slots=True, eq=False)  # not frozen: a frozen dataclass's __init__ costs 3x as much
class _CommittedSend:
    """What the commit stage needs once a message's record is durable; the ledger calls it."""

    commits: MessageCommits
    once: Once
    event: RouterMessageCommitted
    sender: Participant
    participants: tuple[Participant, ...]
    parts: tuple[str, ...]
    client_message_id: str | None

    def __call__(self, outcome: AppendOutcome) -> None:
        self.commits._committed_send(self, outcome)


def _unavailable(event: RouterMessageCommitted, error: BaseException) -> NetworkError:
    unavailable = NetworkError(
        f"the ledger refused {type(event).__name__}: {error}", reason="ledger-unavailable"
    )
    unavailable.__cause__ = error
    return unavailable
