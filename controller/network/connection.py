"""One agent's WebSocket connection, router side: handshake, then read, deliver and heartbeat."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup
from pydantic import ValidationError
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from society_sandbox.network._tasks import WorkPool
from society_sandbox.network.errors import CLOSE_CODES, ErrorCode, NetworkError
from society_sandbox.network.protocol import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Authenticate,
    Authenticated,
    ConversationOpenedFrame,
    DeliveryAck,
    ErrorFrame,
    Heartbeat,
    OpenConversation,
    SendAck,
    SendMessage,
    encode,
    encode_ack,
    parse_client_frame,
)

if TYPE_CHECKING:
    from controller.network.identities import Registration
    from controller.network.router import Router

MAX_FIRST_FRAME_BYTES = 4096
"""Before authentication: an ``authenticate`` frame (a token of at most 256 characters and at
most 16 versions) fits many times over; authenticated frames get ``MAX_FRAME_BYTES``."""


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """What peers that have not authenticated yet may hold of the router."""

    max_unauthenticated: int = 256
    """Connections waiting for their ``authenticate`` frame at once; more are closed (1013)."""
    authenticate_within_s: float = 10.0
    """From TCP accept to the opening handshake, and again from it to ``authenticate`` (or the
    heartbeat timeout, when that is shorter)."""
    first_frame_bytes: int = MAX_FIRST_FRAME_BYTES


DEFAULT_EDGE_LIMITS = EdgeLimits()


def authentication_deadline(limits: EdgeLimits, heartbeat_timeout: float) -> float:
    """Seconds a peer has for each opening step: the edge limit, or a shorter heartbeat timeout."""
    return min(limits.authenticate_within_s, heartbeat_timeout)


class EdgeGuard:
    """Counts the router's unauthenticated sockets, from TCP accept on, against ``EdgeLimits``.

    A socket counts from the moment it is accepted, through the opening handshake, until its
    ``authenticate`` frame is accepted or it closes; one past the cap is closed at accept, so a
    peer that never finishes the upgrade cannot hold more of the router than one that does.
    """

    def __init__(self, limits: EdgeLimits) -> None:
        self.limits = limits
        self._waiting: set[object] = set()

    @property
    def unauthenticated(self) -> int:
        return len(self._waiting)

    def admit(self, socket_owner: object) -> bool:
        """Count a socket just accepted; ``False`` when the cap is already reached."""
        if len(self._waiting) >= self.limits.max_unauthenticated:
            return False
        self._waiting.add(socket_owner)
        return True

    def release(self, socket_owner: object) -> None:
        """The socket authenticated or closed (idempotent)."""
        self._waiting.discard(socket_owner)

    def connection_class(self) -> type[ServerConnection]:
        """The ``websockets`` connection class that counts its socket here from accept on."""
        guard = self

        class EdgeCountedConnection(ServerConnection):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                if not guard.admit(self):
                    transport.close()  # over the cap: no handshake, no buffer, no descriptor

            def connection_lost(self, exc: Exception | None) -> None:
                guard.release(self)
                super().connection_lost(exc)

        return EdgeCountedConnection


MAX_IN_FLIGHT = 256
"""Requests one connection may have in progress; past it the router stops reading its frames."""
REQUEST_WORKERS = 32
"""Conversation requests of one connection waiting for their commit at once (the rest queue in
order); sends need no task: the ledger calls back once each is durable."""
WRITE_BATCH = 64
"""Frames one socket write carries at most."""
_HEARTBEAT = encode(Heartbeat())


async def serve_connection(router: Router, websocket: ServerConnection) -> None:
    """The whole life of one connection (the ``websockets`` handler)."""
    try:
        registration = await _handshake(router, websocket)
    finally:
        router.edge.release(websocket)
    if registration is not None:
        _lift_frame_limit(websocket, MAX_FRAME_BYTES)
        await _Connection(router, websocket, registration).run()


def _lift_frame_limit(websocket: ServerConnection, size: int) -> None:
    """An authenticated peer may send full-size frames (the server started with a small limit)."""
    protocol = websocket.protocol
    if hasattr(protocol, "max_message_size"):  # websockets >= 15
        protocol.max_message_size = size
    else:
        protocol.max_size = size  # type: ignore[attr-defined]


async def _handshake(router: Router, websocket: ServerConnection) -> Registration | None:
    try:
        with anyio.fail_after(
            authentication_deadline(router.edge.limits, router.heartbeat_timeout)
        ):
            raw = await websocket.recv()
    except TimeoutError:
        await _refuse(websocket, "heartbeat-timeout", "no authenticate frame in time")
        return None
    except ConnectionClosed:
        return None
    if not isinstance(raw, str):
        await _refuse(websocket, "malformed-frame", "frames are JSON text, not binary")
        return None
    try:
        frame = parse_client_frame(raw)
    except ValidationError as exc:
        await _refuse(websocket, "malformed-frame", _summary(exc))
        return None
    if not isinstance(frame, Authenticate):
        await _refuse(websocket, "not-authenticated", f"'{frame.type}' before 'authenticate'")
        return None
    if PROTOCOL_VERSION not in frame.versions:
        await _refuse(
            websocket,
            "unsupported-version",
            f"offered {frame.versions}; this router speaks {list(SUPPORTED_VERSIONS)}",
        )
        return None
    registration = router.authenticate(frame.token)
    if registration is None or registration.kind != "agent":
        await _refuse(websocket, "authentication-failed", "unknown or revoked credential")
        return None
    return registration


async def _refuse(websocket: ServerConnection, code: ErrorCode, message: str) -> None:
    try:
        await websocket.send(encode(ErrorFrame(code=code, message=message)))
        await websocket.close(CLOSE_CODES[code], code)
    except ConnectionClosed:
        pass


def _summary(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{exc.error_count()} problem(s); first at '{where}': {first['msg']}"[:300]


class _Connection:
    """An authenticated participant's connection; it is that participant's delivery consumer."""

    def __init__(
        self, router: Router, websocket: ServerConnection, registration: Registration
    ) -> None:
        self.router = router
        self.websocket = websocket
        self.registration = registration
        self.participant = registration.participant
        self.inbox = router.fabric.inbox(registration.participant)
        self._in_flight = 0
        self._slot_freed = anyio.Event()
        self._frames_heard = 0
        self._replies: deque[str] = deque()
        """Acks and refusals of sends, written by the same task as deliveries."""

    def close_for(self, reason: str) -> None:
        self.router.tasks.start_soon(self._close, reason)

    async def _close(self, reason: str) -> None:
        try:
            await self.websocket.close(CLOSE_CODES[reason], reason)
        except ConnectionClosed:
            pass

    async def run(self) -> None:
        self.router.attach(self.registration, self)
        try:
            await self.websocket.send(
                encode(
                    Authenticated(
                        version=PROTOCOL_VERSION,
                        participant=self.participant,
                        heartbeat_interval_seconds=self.router.heartbeat_interval,
                        heartbeat_timeout_seconds=self.router.heartbeat_timeout,
                        max_frame_bytes=MAX_FRAME_BYTES,
                    )
                )
            )
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._until_closed, tasks, self._write)
                tasks.start_soon(self._until_closed, tasks, self._heartbeat)
                await self._until_closed(tasks, self._read, WorkPool(tasks, REQUEST_WORKERS))
        except ConnectionClosed:
            pass
        finally:
            self.router.detach(self.registration, self)

    async def _until_closed(
        self, tasks: TaskGroup, work: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        """Run ``work`` until it ends or the connection closes; then end the connection."""
        try:
            await work(*args)
        except ConnectionClosed:
            pass
        finally:
            tasks.cancel_scope.cancel()

    async def _read(self, requests: WorkPool) -> None:
        async for raw in self.websocket:
            self._frames_heard += 1
            if not isinstance(raw, str):
                await self._reply(ErrorFrame(code="malformed-frame", message="binary frame"))
                continue
            try:
                frame = parse_client_frame(raw)
            except ValidationError as exc:
                await self._reply(ErrorFrame(code="malformed-frame", message=_summary(exc)))
                continue
            if isinstance(frame, SendMessage):
                if self._in_flight >= MAX_IN_FLIGHT:
                    await self._admit()
                self._send(frame)
            elif isinstance(frame, DeliveryAck):
                outcome = self.inbox.acknowledge(frame.message_id)
                if outcome == "acknowledged":
                    self.router.fabric.record_delivered(frame.message_id, self.participant.id)
                elif outcome == "unknown":
                    await self._reply(
                        ErrorFrame(
                            code="unknown-delivery",
                            message=f"{frame.message_id} was not delivered to "
                            f"{self.participant.id}",
                        )
                    )
            elif isinstance(frame, OpenConversation):
                if self._in_flight >= MAX_IN_FLIGHT:
                    await self._admit()
                self._in_flight += 1
                requests.submit(self._open, frame)
            elif isinstance(frame, Authenticate):
                await self._reply(
                    ErrorFrame(code="already-authenticated", message="authenticate once")
                )

    async def _admit(self) -> None:
        """Wait for a free request slot; past ``MAX_IN_FLIGHT`` the reader stops reading."""
        while self._in_flight >= MAX_IN_FLIGHT:
            self._slot_freed = anyio.Event()
            await self._slot_freed.wait()

    def _release(self) -> None:
        self._in_flight -= 1
        self._slot_freed.set()

    def _send(self, frame: SendMessage) -> None:
        """Hand a send to the router; its ack or refusal is queued once the router settles it."""
        request_id, client_message_id = frame.request_id, frame.client_message_id

        def settled(outcome: SendAck | NetworkError) -> None:
            if isinstance(outcome, NetworkError):
                self._queue_reply(encode(_error(outcome, request_id)))
            else:
                self._queue_reply(encode_ack(request_id, client_message_id, outcome))
            self._release()

        self._in_flight += 1
        try:
            self.router.submit_soon(
                self.participant,
                frame.conversation_id,
                frame.parts,
                client_message_id=client_message_id,
                then=settled,
            )
        except NetworkError as exc:
            settled(exc)

    def _queue_reply(self, reply: str) -> None:
        self._replies.append(reply)
        self.inbox.changed.notify()  # the writer waits on its inbox for replies too

    async def _open(self, frame: OpenConversation) -> None:
        try:
            ref = await self.router.open_conversation(
                self.participant, frame.participants, request_id=frame.request_id
            )
            reply: ConversationOpenedFrame | ErrorFrame = ConversationOpenedFrame(
                request_id=frame.request_id,
                conversation_id=ref.conversation_id,
                participants=list(ref.participants),
            )
        except NetworkError as exc:
            reply = _error(exc, frame.request_id)
        try:
            await self._reply(reply)
        finally:
            self._release()

    async def _write(self) -> None:
        """Write replies to sends and this participant's deliveries, as they come.

        Whatever is waiting when the writer wakes goes out in one socket write: a group commit
        settles many sends at once, and their acks and deliveries need not cost a write each.
        """
        replies, inbox, websocket = self._replies, self.inbox, self.websocket
        while True:
            frames = [replies.popleft() for _ in range(min(len(replies), WRITE_BATCH))]
            while len(frames) < WRITE_BATCH:
                message = inbox.take(self)
                if message is None:
                    break
                frames.append(message.wire())
            if frames:
                await _send_frames(websocket, frames)
            elif inbox.owner is not self:
                return
            else:
                await inbox.changed.wait()

    async def _heartbeat(self) -> None:
        """Send a heartbeat every interval; close when the client sent nothing for the timeout."""
        heard, last_heard = self._frames_heard, anyio.current_time()
        while True:
            await anyio.sleep(self.router.heartbeat_interval)
            now = anyio.current_time()
            if self._frames_heard != heard:
                heard, last_heard = self._frames_heard, now
            elif now - last_heard > self.router.heartbeat_timeout:
                await self._close("heartbeat-timeout")
                return
            await self.websocket.send(_HEARTBEAT)

    async def _reply(self, frame: ErrorFrame | ConversationOpenedFrame | str) -> None:
        try:
            await self.websocket.send(frame if isinstance(frame, str) else encode(frame))
        except ConnectionClosed:
            pass  # the reader sees the close and ends the connection


def _error(exc: NetworkError, request_id: str) -> ErrorFrame:
    return ErrorFrame(code=exc.reason, message=exc.detail, request_id=request_id)  # type: ignore[arg-type]


async def _send_frames(websocket: ServerConnection, frames: list[str]) -> None:
    """Send text frames in order, several in one socket write (with ``send``'s flow control).

    ``send_context`` is the guard ``send`` itself uses: it checks that the connection is open
    and, on exit, waits while the transport's buffer is full. Inside it the frames are framed
    by the protocol and joined, as ``websockets.broadcast`` frames its message.
    """
    if len(frames) == 1:
        await websocket.send(frames[0])
        return
    async with websocket.send_context():
        protocol = websocket.protocol
        for frame in frames:
            protocol.send_text(frame.encode())
        websocket.transport.write(b"".join(protocol.data_to_send()))  # send_text never ends it
