"""The run's router: its lifetime, conversations, and commit-then-deliver.

Every message between agents and experiment endpoints passes through one router per run. It
commits each accepted message to the ledger (``RouterMessageCommitted``) before it acknowledges
or delivers it, whatever the link policies say (the commit stage, ``commits``, does this after the
router's checks); the delivery stage (``fabric``) then shapes and
queues it for each receiver. Who may connect is the participant registry's (``identities``);
each agent's connection is ``connection``'s.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup
from websockets.asyncio.server import Server, ServerConnection, serve, unix_serve

from controller.events.network import (
    ConversationOpened,
    RouterMessageCommitted,
    RouterSendsRefused,
    RouterStarted,
    RouterStartFailed,
    RouterStopFailed,
    RouterStopped,
)
from controller.network.commits import MessageCommits, refusal_of
from controller.network.connection import (
    DEFAULT_EDGE_LIMITS,
    EdgeGuard,
    EdgeLimits,
    authentication_deadline,
)
from controller.network.fabric import DEFAULT_RECEIVER_CAPACITY, Fabric
from controller.network.idempotency import Once, OnceKey, SettledSend, claim
from controller.network.identities import (
    Consumer,
    ParticipantKind,
    ParticipantRegistry,
    Registration,
    RouterCredential,
)
from controller.network.limits import (
    DEFAULT_MESSAGE_LIMITS,
    REFUSALS_RECORD_INTERVAL_S,
    MessageLimits,
    SendLimiter,
)
from controller.network.links import LinkController
from controller.network.open_files import raise_open_files_limit
from controller.network.tls import RouterTLS
from ledger.errors import LedgerEncodingError, LedgerError
from ledger.writer import LedgerWriter
from society_sandbox.network._tasks import owned_task_group
from society_sandbox.network.errors import NetworkError
from society_sandbox.network.protocol import (
    MAX_CONVERSATION_PARTICIPANTS,
    PROTOCOL_VERSION,
    ConversationRef,
    Participant,
    ParticipantRef,
    SendAck,
)

__all__ = ["STOP_TIMEOUT_SECONDS", "Consumer", "ParticipantKind", "Router", "RouterCredential"]

STOP_TIMEOUT_SECONDS = 5.0
_log = logging.getLogger("controller.network.router")


@dataclass(frozen=True, slots=True)
class _Conversation:
    ref: ConversationRef
    member_ids: frozenset[str]


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
        edge_limits: EdgeLimits = DEFAULT_EDGE_LIMITS,
        message_limits: MessageLimits = DEFAULT_MESSAGE_LIMITS,
    ) -> None:
        from controller.network.endpoint import Network

        self.url = ""
        self.ledger = ledger
        self.tasks = tasks
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.edge = EdgeGuard(edge_limits)
        self.participants = ParticipantRegistry()
        self._conversations: dict[str, _Conversation] = {}
        self._once: dict[OnceKey, Once | SettledSend] = {}  # a request in progress, or a send
        self._dispatched = False
        self._stopping = False
        self.links = LinkController(ledger, self.participants.participant)
        self.fabric = Fabric(
            ledger,
            self.links,
            tasks,
            receiver_capacity,
            participants=lambda: len(self.participants),
        )
        self.limiter = SendLimiter(message_limits)
        self._recording_refusals = False
        self.commits = MessageCommits(ledger, self.fabric, self._once)
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
        edge_limits: EdgeLimits = DEFAULT_EDGE_LIMITS,
        message_limits: MessageLimits = DEFAULT_MESSAGE_LIMITS,
        unix_socket: socket.socket | None = None,
    ) -> AsyncIterator[Router]:
        """Listen on ``host:port`` (0: any free port) until the block ends.

        ``unix_socket``: also accept on this bound Unix socket (local sandboxes reach the router
        only through it); the router closes it when the block ends.

        ``advertised_host`` is the host name clients use in ``router.url`` (default: ``host``,
        or 127.0.0.1 for a wildcard host); with TLS it must be one of the certificate's names.
        ``edge_limits`` bounds what peers that have not authenticated yet may hold;
        ``message_limits`` what each agent may send (``limits``).
        """
        from controller.network.connection import serve_connection

        raise_open_files_limit()  # one socket per session
        async with owned_task_group() as tasks:
            router = cls(
                ledger,
                tasks,
                receiver_capacity=receiver_capacity,
                heartbeat_interval=heartbeat_interval,
                heartbeat_timeout=heartbeat_timeout,
                edge_limits=edge_limits,
                message_limits=message_limits,
            )

            async def handler(websocket: ServerConnection) -> None:
                await serve_connection(router, websocket)

            options: dict[str, Any] = {
                "max_size": edge_limits.first_frame_bytes,  # lifted once authenticated
                "compression": None,
                "ping_interval": None,
                "open_timeout": authentication_deadline(edge_limits, heartbeat_timeout),
                "close_timeout": 2,
                "create_connection": router.edge.connection_class(),  # counted from accept on
            }
            try:
                server = await serve(
                    handler,
                    host,
                    port,
                    ssl=tls.server_context() if tls is not None else None,
                    **options,
                )
                if unix_socket is not None:
                    try:
                        local = await unix_serve(handler, sock=unix_socket, **options)
                    except OSError:
                        server.close()
                        raise
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
                    if unix_socket is not None:
                        local.close(close_connections=True)
                    await router._stop(server)
                    if unix_socket is not None:
                        await local.wait_closed()

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
        for registration in self.participants:
            if registration.kind == "endpoint" and registration.connection is not None:
                registration.connection.close_for("router-stopping")
        self._record_refusals()
        with anyio.move_on_after(STOP_TIMEOUT_SECONDS):
            await self.fabric.settle()  # delivery records before RouterStopped
        try:
            if failure is not None:
                await self.ledger.append(
                    RouterStopFailed(reason="close-failed", detail=failure), producer="router"
                )
            await self.ledger.append(
                RouterStopped(messages_committed=self.commits.sequence), producer="router"
            )
        except LedgerError:
            pass  # the ledger is already completed or failed; it keeps what it has

    # ---- identities (the registry's; ``connection`` and ``endpoint`` attach consumers) -------

    def register(self, name: str, *, kind: ParticipantKind = "agent") -> RouterCredential:
        """Issue an identity and a fresh 256-bit credential for ``name`` (see the registry)."""
        return self.participants.register(name, kind=kind)

    def revoke(self, participant_id: str) -> None:
        """Refuse the participant's credential from now on and close its live connection."""
        self.participants.revoke(participant_id)

    def authenticate(self, token: str) -> Registration | None:
        """The registration holding ``token`` (constant-time comparison with every credential)."""
        return self.participants.authenticate(token)

    def participant(self, who: ParticipantRef) -> Participant:
        """Resolve a name, identity or endpoint against this run's participants."""
        return self.participants.participant(who)

    def is_authenticated(self, name: str) -> bool:
        """Whether ``name`` is connected and authenticated right now."""
        return self.participants.is_authenticated(name)

    def sessions(self, name: str) -> int:
        """How many connections have authenticated as ``name`` so far."""
        return self.participants.sessions(name)

    async def wait_authenticated(self, name: str, *, after: int = 0) -> None:
        """Until ``name`` is connected by a session later than its first ``after``."""
        await self.participants.wait_authenticated(name, after=after)

    def attach(self, registration: Registration, consumer: Consumer) -> None:
        """``consumer`` is now the participant's live connection (superseding an older one)."""
        self.participants.attach(registration, consumer)
        self.fabric.inbox(registration.participant).attach(consumer)

    def detach(self, registration: Registration, consumer: Consumer) -> None:
        self.participants.detach(registration, consumer)
        self.fabric.inbox(registration.participant).detach(consumer)

    def _registration(self, name: str) -> Registration:
        return self.participants.registration(name)

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
            participant = self.participants.participant(who)
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
        once, fresh = claim(self._once, "open", opener.id, request_id, fingerprint)
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
        """Commit one message, then hand it to every other participant's delivery stage.

        Cancelling the caller stops only its wait: a message once accepted commits and is
        delivered all the same.
        """
        done = anyio.Event()
        outcome: list[SendAck | NetworkError] = []

        def settled(result: SendAck | NetworkError) -> None:
            outcome.append(result)
            done.set()

        self.submit_soon(
            sender, conversation_id, parts, client_message_id=client_message_id, then=settled
        )
        await done.wait()
        if isinstance(outcome[0], NetworkError):
            raise outcome[0]
        return outcome[0]

    def submit_soon(
        self,
        sender: Participant,
        conversation_id: str,
        parts: Sequence[str],
        *,
        client_message_id: str | None,
        then: Callable[[SendAck | NetworkError], None],
    ) -> None:
        """Accept one message for the next group commit; ``then`` gets its ack or refusal.

        Nothing here waits, so a connection accepts its sends in the order it reads them
        without a task per message. A refusal found before the commit (``not-dispatched``, an
        unknown conversation, a stranger, a reused id) raises ``NetworkError`` here. Once the
        message is durable it is handed to the delivery stage (in router-sequence order) and
        ``then`` gets the ``SendAck``; a record the ledger could not take gets the typed
        ``NetworkError`` instead. A retry of a send still in flight gets the first one's outcome.
        """
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
        if sender.id.startswith("agent:"):  # the program's endpoints are the experimenter's
            self._limit(sender, parts)
        self.commits.accept(
            sender,
            conversation_id,
            conversation.ref.participants,
            tuple(parts),
            client_message_id=client_message_id,
            then=then,
        )

    def _limit(self, sender: Participant, parts: Sequence[str]) -> None:
        """Refuse a send over the sender's ``MessageLimits``; the refusal is recorded soon."""
        size = sum(len(part.encode("utf-8", "surrogatepass")) for part in parts)
        reason = self.limiter.check(sender.id, size)
        if reason is None:
            return
        if not self._recording_refusals:
            self._recording_refusals = True
            self.tasks.start_soon(self._record_refusals_soon)
        raise NetworkError(
            f"{sender.id} is over its {reason} limit; this message was not committed",
            reason="rate-limited",
        )

    async def _record_refusals_soon(self) -> None:
        try:
            await anyio.sleep(REFUSALS_RECORD_INTERVAL_S)
        finally:
            self._recording_refusals = False
            self._record_refusals()

    def _record_refusals(self) -> None:
        for sender_id, reason, messages, size in self.limiter.take_refusals():
            self.fabric.record(
                RouterSendsRefused(
                    sender_id=sender_id, reason=reason, messages=messages, bytes=size
                )
            )

    async def _append(self, event: RouterMessageCommitted | ConversationOpened) -> None:
        # shielded: once queued the record commits, and the router must finish what follows
        with anyio.CancelScope(shield=True):
            try:
                await self.ledger.append(event, producer="router")
            except (LedgerEncodingError, ValueError, TypeError) as exc:
                # this record only; the ledger goes on, and the refusal is evidence
                await self._record_refusal(event, exc)
                raise NetworkError(
                    f"the ledger could not encode {type(event).__name__}: {exc}",
                    reason="unencodable-message",
                ) from exc
            except LedgerError as exc:
                raise NetworkError(
                    f"the ledger refused {type(event).__name__}: {exc}",
                    reason="ledger-unavailable",
                ) from exc

    async def _record_refusal(
        self, event: RouterMessageCommitted | ConversationOpened, error: Exception
    ) -> None:
        _log.warning("the ledger could not encode %s: %s", type(event).__name__, error)
        if not isinstance(event, RouterMessageCommitted):
            return
        with contextlib.suppress(LedgerError):  # a failed ledger keeps what it has
            await self.ledger.append(refusal_of(event, error), producer="router")
