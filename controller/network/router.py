"""The run's router: identities and credentials, conversations, and commit-then-deliver.

Every message between agents and experiment endpoints passes through one router per run. It
commits each accepted message to the ledger (``RouterMessageCommitted``) before it acknowledges
or delivers it, whatever the link policies say; the delivery stage (``fabric``) then shapes and
queues it for each receiver.
"""

from __future__ import annotations

import gc
import hmac
import re
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
from anyio.abc import TaskGroup
from websockets.asyncio.server import Server, ServerConnection, serve

from controller.events.network import (
    ConversationOpened,
    RouterMessageCommitted,
    RouterStarted,
    RouterStartFailed,
    RouterStopFailed,
    RouterStopped,
)
from controller.network._tasks import owned_task_group
from controller.network.errors import NetworkError
from controller.network.fabric import DEFAULT_RECEIVER_CAPACITY, Fabric, Message, Signal
from controller.network.links import LinkController
from controller.network.protocol import (
    MAX_CONVERSATION_PARTICIPANTS,
    MAX_FRAME_BYTES,
    NAME_PATTERN,
    PROTOCOL_VERSION,
    ConversationRef,
    Delivery,
    Participant,
    ParticipantRef,
    SendAck,
)
from controller.network.tls import RouterTLS
from ledger.errors import LedgerError
from ledger.writer import LedgerWriter

ParticipantKind = Literal["agent", "endpoint"]
_NAME = re.compile(NAME_PATTERN)
STOP_TIMEOUT_SECONDS = 5.0
_startup_heap_frozen = False


def _freeze_startup_heap() -> None:
    """Move what the process holds when its first router starts out of the collector's sight.

    Modules, classes and functions (≈ 48,000 objects here) are never garbage, yet every full
    collection walks them: on the benchmark machine that was 30-50 ms of stopped event loop,
    which set the router's p99 latency. Done once per process; whatever is garbage now is
    collected first, so nothing dead is kept.
    """
    global _startup_heap_frozen
    if not _startup_heap_frozen:
        _startup_heap_frozen = True
        gc.collect()
        gc.freeze()


class Consumer(Protocol):
    """A participant's live attachment: a WebSocket connection or an in-process endpoint."""

    def close_for(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class RouterCredential:
    """A participant's identity and its secret token (never logged, never in the ledger)."""

    participant: Participant
    token: str = field(repr=False)


@dataclass(eq=False, slots=True)
class _Registration:
    participant: Participant
    kind: ParticipantKind
    secret: bytes | None  # None once revoked
    connection: Consumer | None = None


@dataclass(frozen=True, slots=True)
class _Conversation:
    ref: ConversationRef
    member_ids: frozenset[str]


class _Once:
    """The single outcome of an idempotent request; retries with the same key share it."""

    __slots__ = ("_error", "_result", "_settled", "_waiters", "fingerprint")

    def __init__(self, fingerprint: object) -> None:
        self.fingerprint = fingerprint
        self._settled = False
        self._waiters: anyio.Event | None = None  # made only when a retry overtakes the first
        self._result: Any = None
        self._error: NetworkError | None = None

    @classmethod
    def settled(cls, fingerprint: object, result: Any) -> _Once:
        once = cls(fingerprint)
        once.settle(result)
        return once

    def settle(self, result: Any = None, error: NetworkError | None = None) -> None:
        self._result, self._error, self._settled = result, error, True
        if self._waiters is not None:
            self._waiters.set()

    async def outcome(self) -> Any:
        if not self._settled:
            if self._waiters is None:
                self._waiters = anyio.Event()
            await self._waiters.wait()
        if self._error is not None:
            raise self._error
        return self._result


class Router:
    """Create with ``Router.serve(ledger)``; ``router.network`` is the program's ``ctx.network``."""

    def __init__(
        self,
        ledger: LedgerWriter,
        tasks: TaskGroup,
        *,
        receiver_capacity: int,
        heartbeat_interval: float,
        heartbeat_timeout: float,
    ) -> None:
        from controller.network.endpoint import Network

        self.url = ""
        self.ledger = ledger
        self.tasks = tasks
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self._registrations: dict[str, _Registration] = {}  # by name
        self._by_id: dict[str, _Registration] = {}
        self._conversations: dict[str, _Conversation] = {}
        # a request in progress, or a settled send as (fingerprint, message id, sequence): plain
        # tuples of strings and ints, which the garbage collector stops tracking
        self._once: dict[tuple[str, str, str], _Once | tuple[object, str, int]] = {}
        self._sequence = 0
        self._released = 0
        self._committed: dict[int, Message | None] = {}
        self._dispatched = False
        self._stopping = False
        self._auth_changed = Signal()
        self.links = LinkController(ledger, self.participant)
        self.fabric = Fabric(ledger, self.links, tasks, receiver_capacity)
        self.network = Network(self)

    @classmethod
    @asynccontextmanager
    async def serve(
        cls,
        ledger: LedgerWriter,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: RouterTLS | None = None,
        advertised_host: str | None = None,
        receiver_capacity: int = DEFAULT_RECEIVER_CAPACITY,
        heartbeat_interval: float = 10.0,
        heartbeat_timeout: float = 30.0,
    ) -> AsyncIterator[Router]:
        """Listen on ``host:port`` (0: any free port) until the block ends.

        ``advertised_host`` is the host name clients use in ``router.url`` (default: ``host``,
        or 127.0.0.1 for a wildcard host); with TLS it must be one of the certificate's names.
        """
        from controller.network.connection import serve_connection

        _freeze_startup_heap()
        async with owned_task_group() as tasks:
            router = cls(
                ledger,
                tasks,
                receiver_capacity=receiver_capacity,
                heartbeat_interval=heartbeat_interval,
                heartbeat_timeout=heartbeat_timeout,
            )

            async def handler(websocket: ServerConnection) -> None:
                await serve_connection(router, websocket)

            try:
                server = await serve(
                    handler,
                    host,
                    port,
                    ssl=tls.server_context() if tls is not None else None,
                    max_size=MAX_FRAME_BYTES,
                    compression=None,
                    ping_interval=None,
                    open_timeout=heartbeat_timeout,
                    close_timeout=2,
                )
            except OSError as exc:
                await ledger.append(
                    RouterStartFailed(
                        host=host, port=port, reason="listen-failed", detail=str(exc)
                    ),
                    producer="router",
                )
                raise NetworkError(
                    f"the router could not listen on {host}:{port}: {exc}",
                    reason="router-start-failed",
                ) from exc
            bound_port = server.sockets[0].getsockname()[1]
            url_host = advertised_host or (
                host if host not in ("", "0.0.0.0", "::") else "127.0.0.1"
            )
            if ":" in url_host:
                url_host = f"[{url_host}]"
            router.url = f"{'wss' if tls else 'ws'}://{url_host}:{bound_port}"
            try:
                await ledger.append(
                    RouterStarted(
                        url=router.url,
                        host=host,
                        port=bound_port,
                        tls=tls is not None,
                        protocol_version=PROTOCOL_VERSION,
                    ),
                    producer="router",
                )
                yield router
            finally:
                with anyio.CancelScope(shield=True):
                    await router._stop(server)

    async def _stop(self, server: Server) -> None:
        self._stopping = True
        failure: str | None = None
        with anyio.move_on_after(STOP_TIMEOUT_SECONDS) as waited:
            try:
                server.close(close_connections=True)
                await server.wait_closed()
            except Exception as exc:
                failure = f"{type(exc).__name__}: {exc}"
        if waited.cancelled_caught:
            failure = f"connections did not close within {STOP_TIMEOUT_SECONDS}s"
        for registration in self._by_id.values():
            if registration.kind == "endpoint" and registration.connection is not None:
                registration.connection.close_for("router-stopping")
        with anyio.move_on_after(STOP_TIMEOUT_SECONDS):
            await self.fabric.settle()  # delivery records before RouterStopped
        try:
            if failure is not None:
                await self.ledger.append(
                    RouterStopFailed(reason="close-failed", detail=failure), producer="router"
                )
            await self.ledger.append(
                RouterStopped(messages_committed=self._sequence), producer="router"
            )
        except LedgerError:
            pass  # the ledger is already completed or failed; it keeps what it has

    # ---- identities ------------------------------------------------------------------------

    def register(self, name: str, *, kind: ParticipantKind = "agent") -> RouterCredential:
        """Issue an identity and a fresh 256-bit credential for ``name``.

        A name is unique in a run; registering a revoked name again issues a new credential for
        the same participant.
        """
        if not isinstance(name, str) or not _NAME.match(name):
            raise NetworkError(
                f"{name!r} is not a participant name (letters, digits, '_', '.', '-'; 1-64)",
                reason="invalid-name",
            )
        token = secrets.token_urlsafe(32)
        existing = self._registrations.get(name)
        if existing is not None:
            if existing.secret is not None or existing.kind != kind:
                raise NetworkError(
                    f"{name!r} is already registered as {existing.participant.id}",
                    reason="participant-exists",
                )
            existing.secret = token.encode()
            return RouterCredential(existing.participant, token)
        participant = Participant(id=f"{kind}:{name}", name=name)
        registration = _Registration(participant, kind, token.encode())
        self._registrations[name] = registration
        self._by_id[participant.id] = registration
        return RouterCredential(participant, token)

    def revoke(self, participant_id: str) -> None:
        """Refuse the participant's credential from now on and close its live connection."""
        registration = self._by_id.get(participant_id)
        if registration is None:
            raise NetworkError(
                f"no participant {participant_id!r} in this run", reason="unknown-participant"
            )
        registration.secret = None
        if registration.connection is not None:
            registration.connection.close_for("revoked")

    def authenticate(self, token: str) -> _Registration | None:
        """The registration holding ``token`` (constant-time comparison with every credential)."""
        presented = token.encode()
        found: _Registration | None = None
        for registration in self._by_id.values():
            secret = registration.secret
            if secret is not None and hmac.compare_digest(secret, presented):
                found = registration
        return found

    def participant(self, who: ParticipantRef) -> Participant:
        """Resolve a name, identity or endpoint against this run's participants."""
        if not isinstance(who, str | Participant):
            who = who.participant
        name = who.name if isinstance(who, Participant) else who
        registration = self._registrations.get(name) if isinstance(name, str) else None
        if registration is None or (
            isinstance(who, Participant) and registration.participant != who
        ):
            raise NetworkError(
                f"{who!r} is not a participant of this run (known: "
                f"{', '.join(sorted(self._registrations)) or 'none'})",
                reason="unknown-participant",
            )
        return registration.participant

    def is_authenticated(self, name: str) -> bool:
        """Whether ``name`` is connected and authenticated right now."""
        return self._registration(name).connection is not None

    async def wait_authenticated(self, name: str) -> None:
        registration = self._registration(name)
        while registration.connection is None:
            await self._auth_changed.wait()

    def attach(self, registration: _Registration, consumer: Consumer) -> None:
        """``consumer`` is now the participant's live connection (superseding an older one)."""
        previous = registration.connection
        registration.connection = consumer
        if previous is not None and previous is not consumer:
            previous.close_for("superseded")
        self.fabric.inbox(registration.participant).attach(consumer)
        self._auth_changed.notify()

    def detach(self, registration: _Registration, consumer: Consumer) -> None:
        if registration.connection is consumer:
            registration.connection = None
            self._auth_changed.notify()
        self.fabric.inbox(registration.participant).detach(consumer)

    def _registration(self, name: str) -> _Registration:
        return self._by_id[self.participant(name).id]

    # ---- dispatch, conversations and messages ----------------------------------------------

    async def dispatch(self) -> None:
        """From now on agents' sends are accepted (before it they get ``not-dispatched``)."""
        self._dispatched = True

    @property
    def dispatched(self) -> bool:
        return self._dispatched

    async def open_conversation(
        self,
        opener: Participant,
        others: Sequence[ParticipantRef],
        *,
        request_id: str | None = None,
    ) -> ConversationRef:
        """Open a conversation of ``opener`` and ``others`` and record ``ConversationOpened``."""
        members = [opener]
        for who in others:
            participant = self.participant(who)
            if participant not in members:
                members.append(participant)
        if len(members) < 2:
            raise NetworkError(
                "a conversation needs at least one participant besides its opener",
                reason="unknown-participant",
            )
        if len(members) > MAX_CONVERSATION_PARTICIPANTS:
            raise NetworkError(
                f"a conversation holds at most {MAX_CONVERSATION_PARTICIPANTS} participants",
                reason="malformed-frame",
            )
        fingerprint = tuple(p.id for p in members)
        once, fresh = self._claim("open", opener.id, request_id, fingerprint)
        if not fresh:
            return await once.outcome()  # type: ignore[no-any-return]
        conversation_id = f"c-{len(self._conversations) + 1}"
        ref = ConversationRef(conversation_id, tuple(members))
        self._conversations[conversation_id] = _Conversation(ref, frozenset(fingerprint))
        try:
            await self._append(
                ConversationOpened(
                    conversation_id=conversation_id,
                    opened_by=opener.id,
                    participants=list(fingerprint),
                )
            )
        except NetworkError as exc:
            del self._conversations[conversation_id]
            once.settle(error=exc)
            raise
        once.settle(ref)
        return ref

    async def submit(
        self,
        sender: Participant,
        conversation_id: str,
        parts: Sequence[str],
        *,
        client_message_id: str | None = None,
    ) -> SendAck:
        """Commit one message, then hand it to every other participant's delivery stage."""
        if not self._dispatched:
            raise NetworkError(
                "the run has not dispatched its program yet", reason="not-dispatched"
            )
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            raise NetworkError(
                f"no conversation {conversation_id!r}", reason="unknown-conversation"
            )
        if sender.id not in conversation.member_ids:
            raise NetworkError(
                f"{sender.id} is not a participant of {conversation_id}",
                reason="not-a-participant",
            )
        parts = tuple(parts)
        once, fresh = self._claim("send", sender.id, client_message_id, (conversation_id, parts))
        if not fresh:
            return await once.outcome()  # type: ignore[no-any-return]
        self._sequence += 1
        sequence = self._sequence
        message_id = f"m-{sequence}"
        event = RouterMessageCommitted(
            conversation_id=conversation_id,
            message_id=message_id,
            sender_id=sender.id,
            router_sequence=sequence,
            parts=list(parts),
        )
        self.fabric.flush_delivered()  # waiting delivery records share this commit
        try:
            await self._append(event)
        except NetworkError as exc:
            self._release(sequence, None)
            once.settle(error=exc)
            raise
        delivery = Delivery(
            message_id, conversation_id, sender, conversation.ref.participants, parts, sequence
        )
        self._release(sequence, Message(delivery))
        ack = SendAck(message_id, sequence)
        once.settle(ack)
        if client_message_id is not None:
            self._once[("send", sender.id, client_message_id)] = (
                once.fingerprint,
                message_id,
                sequence,
            )
        return ack

    def _claim(
        self, kind: str, participant_id: str, request_id: str | None, fingerprint: object
    ) -> tuple[_Once, bool]:
        """The outcome slot of a request and whether this call is the first to claim it."""
        if request_id is None:
            return _Once(fingerprint), True
        key = (kind, participant_id, request_id)
        existing = self._once.get(key)
        if existing is None:
            once = self._once[key] = _Once(fingerprint)
            return once, True
        if isinstance(existing, tuple):
            settled, message_id, sequence = existing
            existing = _Once.settled(settled, SendAck(message_id, sequence))
        if existing.fingerprint != fingerprint:
            raise NetworkError(
                f"request id {request_id!r} was used before for a different request",
                reason="client-message-id-conflict",
            )
        return existing, False

    async def _append(self, event: RouterMessageCommitted | ConversationOpened) -> None:
        # shielded: once queued the record commits, and the router must finish what follows
        with anyio.CancelScope(shield=True):
            try:
                await self.ledger.append(event, producer="router")
            except LedgerError as exc:
                raise NetworkError(
                    f"the ledger refused {type(event).__name__}: {exc}",
                    reason="ledger-unavailable",
                ) from exc

    def _release(self, sequence: int, message: Message | None) -> None:
        """Hand committed messages to the delivery stage in router-sequence order."""
        self._committed[sequence] = message
        while self._released + 1 in self._committed:
            self._released += 1
            ready = self._committed.pop(self._released)
            if ready is not None:
                self.fabric.fan_out(ready, ready.delivery.participants)
