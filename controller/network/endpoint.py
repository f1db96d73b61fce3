"""``ctx.network``: experiment-controlled endpoints and their conversations, in the controller.

An endpoint is a participant of its own (``endpoint:<name>``) for diagnostics, workload and
observation; it cannot take a roster agent's name, so it can never speak as one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
from pydantic import TypeAdapter, ValidationError

from controller.events.network import (
    EndpointClosed,
    EndpointMessageReceived,
    EndpointMessageSent,
    EndpointOpened,
    RouterMessagesDelivered,
)
from controller.network.links import LinkController
from ledger.errors import LedgerError
from ledger.events import Event
from society_sandbox.network.errors import NetworkError
from society_sandbox.network.protocol import (
    ConversationRef,
    Delivery,
    Participant,
    ParticipantRef,
    Parts,
    SendAck,
)

if TYPE_CHECKING:
    from controller.network.router import Router

_parts: TypeAdapter[list[str]] = TypeAdapter(Parts)


class Network:
    """The program's view of the network: ``endpoint(name)`` and ``links``."""

    def __init__(self, router: Router) -> None:
        self._router = router

    @property
    def links(self) -> LinkController:
        return self._router.links

    def participant(self, name: str) -> Participant:
        """The identity of a participant of this run, by name."""
        return self._router.participant(name)

    @asynccontextmanager
    async def endpoint(self, name: str) -> AsyncIterator[Endpoint]:
        """An experiment endpoint named ``name`` for the life of the block."""
        router = self._router
        credential = router.register(name, kind="endpoint")
        registration = router.authenticate(credential.token)
        assert registration is not None
        endpoint = Endpoint(router, credential.participant)
        try:
            await _append(router, EndpointOpened(endpoint_id=endpoint.participant.id, name=name))
        except BaseException:
            router.revoke(endpoint.participant.id)
            raise
        router.attach(registration, endpoint)
        try:
            yield endpoint
        finally:
            endpoint.close_for("endpoint-closed")
            router.detach(registration, endpoint)
            router.revoke(endpoint.participant.id)
            with anyio.CancelScope(shield=True):
                try:
                    await _append(router, EndpointClosed(endpoint_id=endpoint.participant.id))
                except NetworkError:
                    pass  # the ledger is completed or failed; it keeps what it has


class Endpoint:
    """One experiment-controlled participant: open conversations, send, receive."""

    def __init__(self, router: Router, participant: Participant) -> None:
        self.participant = participant
        self._router = router
        self._inbox = router.fabric.inbox(participant)
        self._closed: str | None = None

    @property
    def name(self) -> str:
        return self.participant.name

    def close_for(self, reason: str) -> None:
        if self._closed is None:
            self._closed = reason
            self._inbox.changed.notify()

    async def open(self, *participants: ParticipantRef) -> Conversation:
        """Open a conversation with ``participants`` (names, identities or endpoints)."""
        self._check_open()
        ref = await self._router.open_conversation(self.participant, participants)
        return Conversation(self, ref)

    def conversation(self, delivery: Delivery) -> Conversation:
        """The conversation a received message belongs to, to reply in it."""
        return Conversation(self, ConversationRef(delivery.conversation_id, delivery.participants))

    async def messages(self) -> AsyncIterator[Delivery]:
        """What this endpoint receives, each message once, until the endpoint closes.

        Taking a message records ``RouterMessagesDelivered`` and ``EndpointMessageReceived``.
        """
        inbox = self._inbox
        while True:
            # a full inbox never waits below, and each take's records are shielded: without this
            # a deadline around the loop would not fire while senders keep the inbox full
            await anyio.lowlevel.checkpoint_if_cancelled()
            message = inbox.take(self)
            if message is None:
                if self._closed is not None:
                    return
                await inbox.changed.wait()
                continue
            delivery = message.delivery
            with anyio.CancelScope(shield=True):
                try:
                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(
                            _append,
                            self._router,
                            RouterMessagesDelivered(
                                receiver_id=self.participant.id, message_ids=[delivery.message_id]
                            ),
                        )
                        tasks.start_soon(
                            _append,
                            self._router,
                            EndpointMessageReceived(
                                endpoint_id=self.participant.id,
                                conversation_id=delivery.conversation_id,
                                message_id=delivery.message_id,
                                sender_id=delivery.sender.id,
                            ),
                        )
                except* NetworkError as group:
                    raise group.exceptions[0] from None
            inbox.acknowledge(delivery.message_id)
            yield delivery

    def _check_open(self) -> None:
        if self._closed is not None:
            raise NetworkError(
                f"endpoint {self.name!r} is closed ({self._closed})", reason="endpoint-closed"
            )


class Conversation:
    """A conversation an endpoint takes part in; ``send`` reaches every other participant."""

    def __init__(self, endpoint: Endpoint, ref: ConversationRef) -> None:
        self.endpoint = endpoint
        self.conversation_id = ref.conversation_id
        self.participants = ref.participants

    async def send(self, *parts: str, client_message_id: str | None = None) -> SendAck:
        """Send 1-10 text parts (at most 32 KiB each); returns once the router committed it."""
        try:
            checked = _parts.validate_python(list(parts))
        except ValidationError as exc:
            raise ValueError(f"a message is 1-10 str parts of at most 32 KiB: {exc}") from None
        endpoint = self.endpoint
        endpoint._check_open()
        router = endpoint._router
        ack = await router.submit(
            endpoint.participant,
            self.conversation_id,
            checked,
            client_message_id=client_message_id,
        )
        await _append(
            router,
            EndpointMessageSent(
                endpoint_id=endpoint.participant.id,
                conversation_id=self.conversation_id,
                message_id=ack.message_id,
            ),
        )
        return ack


async def _append(router: Router, event: Event) -> None:
    try:
        await router.ledger.append(event, producer="endpoint")
    except LedgerError as exc:
        raise NetworkError(
            f"the ledger refused {type(event).__name__}: {exc}", reason="ledger-unavailable"
        ) from exc
