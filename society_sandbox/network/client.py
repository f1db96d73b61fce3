"""The agent-side client of the router: what runtimes in other processes and pods use.

It imports only the protocol, ``websockets``, ``anyio``, pydantic and the standard library; never
the router, the kernel, Temporal or Kubernetes. A session reconnects by itself: sends still
waiting for their ack are sent again under the same client message id (the router commits each
once), and the router redelivers what this participant had not acknowledged; the session hands
each message to the application exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup, TaskStatus
from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from society_sandbox.network._tasks import Signal, owned_task_group
from society_sandbox.network.errors import CLOSE_REASONS, NetworkError
from society_sandbox.network.protocol import (
    MAX_FRAME_BYTES,
    SUPPORTED_VERSIONS,
    Authenticate,
    Authenticated,
    ConversationOpenedFrame,
    ConversationRef,
    Delivery,
    DeliveryFrame,
    ErrorFrame,
    Heartbeat,
    OpenConversation,
    Participant,
    SendAck,
    SendAckFrame,
    SendMessage,
    encode,
    encode_delivery_ack,
    parse_router_frame,
)


def _tcp_address(url: str, where: dict[str, Any]) -> tuple[str, int] | None:
    """The host and port a session dials: ``address``'s, else the URL's; ``None`` over a Unix
    socket (or a URL that names no host, which ``connect`` then refuses)."""
    if "unix" in where:
        return None
    if "port" in where:
        return where["host"], where["port"]
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "wss" else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


FATAL_CLOSES = frozenset({"authentication-failed", "unsupported-version", "revoked", "superseded"})
"""Close reasons after which reconnecting cannot help."""
DIAL_S = 0.25
"""Before the first session, how long one TCP dial may wait for the router's answer before it is
given up and dialled again (a network policy not yet in force drops the first packets of a warm
pod's connection); after ``QUICK_DIALS`` failures the limit doubles with each, up to the
heartbeat timeout. The TLS and WebSocket handshakes that follow have the heartbeat timeout."""
QUICK_DIALS = 40
DIAL_AGAIN_S = 0.1
"""Before the first session, the pause after each of the first ``QUICK_DIALS`` failures (a
policy's refusal, or a router not yet listening, fails at once); after them, and between
sessions, ``RECONNECT_DELAY``'s doubling."""
RECONNECT_DELAY = (0.05, 2.0)
NOT_DISPATCHED_RETRY = (0.02, 0.5)
_HEARTBEAT = encode(Heartbeat())


@dataclass(eq=False, slots=True)
class _Request:
    frame: SendMessage | OpenConversation
    done: asyncio.Event = field(default_factory=asyncio.Event)  # see ``Signal``: asyncio only
    result: SendAck | ConversationRef | None = None
    error: NetworkError | None = None
    attempts: int = 0
    waiting_to_retry: bool = False

    def settle(
        self, result: SendAck | ConversationRef | None = None, error: NetworkError | None = None
    ) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


class AgentSession:
    """A connected participant. Create it with ``connect_agent``."""

    def __init__(
        self,
        url: str,
        token: str,
        ssl_context: ssl.SSLContext | None,
        unix_path: str | None = None,
        address: str | None = None,
    ) -> None:
        self._url = url
        self._unix: dict[str, Any] = {"unix": True, "path": unix_path} if unix_path else {}
        if address and not unix_path:
            host, _, port = address.rpartition(":")
            self._unix = {"host": host.strip("[]"), "port": int(port)}
        self._tcp = _tcp_address(url, self._unix)
        self._token = token
        self._ssl = ssl_context
        self._identity: Participant | None = None
        self._websocket: ClientConnection | None = None
        self._heartbeat_interval = 10.0
        self._heartbeat_timeout = 30.0
        self._requests: dict[str, _Request] = {}
        self._request_ids = itertools.count(1)
        self._inbox: deque[Delivery] = deque()
        self._buffered: set[str] = set()
        self._seen: set[str] = set()
        self._inbox_changed = Signal()
        # client message ids: a random session prefix and a counter (no entropy per send)
        self._message_ids = itertools.count(1)
        self._message_prefix = f"cm-{secrets.token_hex(8)}-"
        self._ended: NetworkError | None = None
        self._closing = False
        self._frames_heard = 0
        self._silenced: ClientConnection | None = None
        """The connection the heartbeat watch closed for its silence; the session reconnects."""

    @property
    def identity(self) -> Participant:
        """The router-issued identity this session speaks as."""
        assert self._identity is not None, "the session authenticates before it is handed out"
        return self._identity

    @property
    def connected(self) -> bool:
        return self._websocket is not None

    async def open(self, *participant_names: str) -> ConversationRef:
        """Open a conversation with the named participants; this participant joins it too."""
        frame = OpenConversation(
            request_id=self._next_request_id(), participants=list(participant_names)
        )
        result = await self._request(frame)
        assert isinstance(result, ConversationRef)
        return result

    async def send(
        self, conversation_id: str, *parts: str, client_message_id: str | None = None
    ) -> SendAck:
        """Send 1-10 text parts; returns once the router committed the message.

        While the run has not dispatched its program the router answers ``not-dispatched``; the
        session waits and retries. Other refusals raise ``NetworkError``.
        """
        frame = SendMessage(
            request_id=self._next_request_id(),
            conversation_id=conversation_id,
            client_message_id=client_message_id
            or f"{self._message_prefix}{next(self._message_ids)}",
            parts=list(parts),
        )
        result = await self._request(frame)
        assert isinstance(result, SendAck)
        return result

    async def deliveries(self) -> AsyncIterator[Delivery]:
        """Each message delivered to this participant, once, in per-sender order.

        Taking a message acknowledges it to the router. The stream ends when the router stops,
        and raises ``NetworkError`` when the session can no longer receive (revoked, superseded).
        """
        while True:
            if self._inbox:
                delivery = self._inbox.popleft()
                self._buffered.discard(delivery.message_id)
                await self._transmit(encode_delivery_ack(delivery.message_id))
                yield delivery
                continue
            if self._ended is not None:
                if self._ended.reason == "router-stopping":
                    return
                raise self._ended
            await self._inbox_changed.wait()

    # ---- requests --------------------------------------------------------------------------

    def _next_request_id(self) -> str:
        return f"r-{next(self._request_ids)}"

    async def _request(self, frame: SendMessage | OpenConversation) -> SendAck | ConversationRef:
        if self._ended is not None:
            raise self._ended
        request = _Request(frame)
        self._requests[frame.request_id] = request
        try:
            await self._transmit(encode(frame))
            await request.done.wait()
        finally:
            self._requests.pop(frame.request_id, None)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    async def _transmit(self, raw: str) -> None:
        """Send now if connected; otherwise reconnection sends what is still pending."""
        websocket = self._websocket
        if websocket is not None:
            try:
                await websocket.send(raw)
            except ConnectionClosed:
                pass

    async def _retry_later(self, request: _Request) -> None:
        low, high = NOT_DISPATCHED_RETRY
        request.waiting_to_retry = True
        try:
            await anyio.sleep(min(high, low * 2 ** min(request.attempts, 10)))
        finally:
            request.waiting_to_retry = False
        request.attempts += 1
        if not request.done.is_set():
            await self._transmit(encode(request.frame))

    # ---- the connection --------------------------------------------------------------------

    async def _run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        failures = 0
        while not self._closing:
            try:
                # Before the first session, the TCP dial has a short limit of its own: packets
                # a network policy not yet in force drops (a warm pod's first seconds) are given
                # up and dialled again at once, not left to TCP's retransmissions (1, 3, 7 s).
                dialled = (
                    await self._dial(self._tcp, failures)
                    if not started and self._tcp is not None
                    else None
                )
                where = {"sock": dialled} if dialled is not None else self._unix
                async with connect(
                    self._url,
                    **where,
                    ssl=self._ssl,
                    max_size=MAX_FRAME_BYTES,
                    compression=None,
                    ping_interval=None,
                    open_timeout=self._heartbeat_timeout,
                    close_timeout=2,
                ) as websocket:
                    await self._authenticate(websocket)
                    failures = 0
                    if not started:
                        started = True
                        task_status.started()
                    await self._serve(websocket)
            except NetworkError as exc:
                self._end(exc)
                if not started:
                    raise
                return
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                closed = _close_reason(exc)
                if closed in FATAL_CLOSES:
                    error = NetworkError(f"the router closed the session: {closed}", reason=closed)
                    self._end(error)
                    if not started:
                        raise error from exc
                    return
                if closed == "router-stopping":
                    self._end(NetworkError("the router stopped", reason="router-stopping"))
                    return
            except InvalidURI as exc:
                raise NetworkError(
                    f"{self._url!r} is not a ws:// or wss:// URL", reason="malformed-frame"
                ) from exc
            finally:
                self._websocket = None
            if self._closing:
                return
            failures += 1
            low, high = RECONNECT_DELAY
            delay = (
                DIAL_AGAIN_S
                if not started and failures <= QUICK_DIALS
                else min(high, low * 2 ** min(failures, 10))
            )
            await anyio.sleep(delay * random.uniform(0.5, 1.0))

    async def _dial(self, address: tuple[str, int], failures: int) -> socket.socket:
        """A TCP connection to the router's ``address``, given up after ``DIAL_S`` (doubling
        after ``QUICK_DIALS`` failures)."""
        limit = min(self._heartbeat_timeout, DIAL_S * 2 ** max(0, failures - QUICK_DIALS))
        loop = asyncio.get_running_loop()
        host, port = address
        family, kind, proto, _, resolved = (
            await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            with anyio.fail_after(limit):
                await loop.sock_connect(sock, resolved)
        except BaseException:
            sock.close()
            raise
        return sock

    async def _authenticate(self, websocket: ClientConnection) -> None:
        await websocket.send(
            encode(Authenticate(versions=list(SUPPORTED_VERSIONS), token=self._token))
        )
        with anyio.fail_after(self._heartbeat_timeout):
            raw = await websocket.recv()
        try:
            frame = parse_router_frame(raw)
        except ValidationError as exc:
            raise NetworkError(
                f"the router answered authenticate with an unknown frame: {exc}",
                reason="malformed-frame",
            ) from None
        if isinstance(frame, ErrorFrame):
            raise NetworkError(
                f"the router refused the session: {frame.message}", reason=frame.code
            )
        if not isinstance(frame, Authenticated):
            raise NetworkError(
                f"expected 'authenticated', got {frame.type!r}", reason="malformed-frame"
            )
        if self._identity is not None and frame.participant != self._identity:
            raise NetworkError(
                "the credential now names another participant", reason="authentication-failed"
            )
        self._identity = frame.participant
        self._heartbeat_interval = frame.heartbeat_interval_seconds
        self._heartbeat_timeout = frame.heartbeat_timeout_seconds

    async def _serve(self, websocket: ClientConnection) -> None:
        self._websocket = websocket
        async with owned_task_group() as tasks:
            tasks.start_soon(self._heartbeat, websocket)
            for request in list(self._requests.values()):
                if not request.waiting_to_retry and not request.done.is_set():
                    await websocket.send(encode(request.frame))
            await self._read(websocket, tasks)

    async def _heartbeat(self, websocket: ClientConnection) -> None:
        """Send a heartbeat every interval; close the connection once the router fell silent.

        Silence is watched here, by counting frames, rather than by a deadline around every
        read: a cancel scope per received frame cost more than the frame's own handling.
        """
        heard, last_heard = self._frames_heard, anyio.current_time()
        while True:
            await anyio.sleep(min(self._heartbeat_interval, self._heartbeat_timeout))
            now = anyio.current_time()
            if self._frames_heard != heard:
                heard, last_heard = self._frames_heard, now
            elif now - last_heard > self._heartbeat_timeout:
                self._silenced = websocket
                await websocket.close(4008, "heartbeat-timeout")
                return
            try:
                await websocket.send(_HEARTBEAT)
            except ConnectionClosed:
                return

    async def _read(self, websocket: ClientConnection, tasks: TaskGroup) -> None:
        while True:
            try:
                raw = await websocket.recv()
            except ConnectionClosed:
                if self._silenced is websocket:
                    return  # the heartbeat watch closed it: reconnect
                raise
            self._frames_heard += 1
            try:
                frame = parse_router_frame(raw)
            except ValidationError:
                continue  # a newer router's frame this client does not know; skip it
            if isinstance(frame, DeliveryFrame):
                await self._received(frame, websocket)
            elif isinstance(frame, SendAckFrame):
                request = self._requests.get(frame.request_id)
                if request is not None:
                    request.settle(SendAck(frame.message_id, frame.router_sequence))
            elif isinstance(frame, ConversationOpenedFrame):
                request = self._requests.get(frame.request_id)
                if request is not None:
                    request.settle(
                        ConversationRef(frame.conversation_id, tuple(frame.participants))
                    )
            elif isinstance(frame, ErrorFrame):
                request = self._requests.get(frame.request_id or "")
                if request is None:
                    continue
                if frame.code == "not-dispatched":
                    tasks.start_soon(self._retry_later, request)
                else:
                    request.settle(error=NetworkError(frame.message, reason=frame.code))

    async def _received(self, frame: DeliveryFrame, websocket: ClientConnection) -> None:
        message_id = frame.message_id
        if message_id in self._seen:
            if message_id not in self._buffered:  # handed over already; its ack was lost
                await websocket.send(encode_delivery_ack(message_id))
            return
        self._seen.add(message_id)
        self._buffered.add(message_id)
        self._inbox.append(
            Delivery(
                message_id=message_id,
                conversation_id=frame.conversation_id,
                sender=frame.sender,
                participants=tuple(frame.participants),
                parts=tuple(frame.parts),
                router_sequence=frame.router_sequence,
            )
        )
        self._wake_receivers()

    def _wake_receivers(self) -> None:
        self._inbox_changed.notify()

    def _end(self, error: NetworkError) -> None:
        self._ended = error
        for request in list(self._requests.values()):
            request.settle(error=error)
        self._wake_receivers()


def _close_reason(exc: BaseException) -> str | None:
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        return CLOSE_REASONS.get(exc.rcvd.code)
    return None


@asynccontextmanager
async def connect_agent(
    url: str,
    token: str,
    *,
    ca_file: str | Path | None = None,
    ssl_context: ssl.SSLContext | None = None,
    unix_path: str | None = None,
    address: str | None = None,
) -> AsyncIterator[AgentSession]:
    """Connect and authenticate to the router at ``url`` with a router-issued ``token``.

    For ``wss://`` pass the run's CA certificate as ``ca_file`` (or a ready ``ssl_context``).
    The block starts once the router accepted the credential; a refused credential raises
    ``NetworkError`` (``authentication-failed``). Wrap in ``anyio.fail_after`` to bound the wait
    for a router that is not listening yet. ``unix_path``: reach the router through this Unix
    socket (a local sandbox's only way out); ``url`` then only names the host in the handshake.
    ``address`` (``host:port``): dial there instead of the URL's host, which still names the
    router in the handshake and TLS (a warm pod, where the router's name does not resolve).
    """
    if ssl_context is None and ca_file is not None:
        ssl_context = ssl.create_default_context(cafile=str(ca_file))
    session = AgentSession(
        url, token, ssl_context if url.startswith("wss:") else None, unix_path, address
    )
    async with owned_task_group() as tasks:
        await tasks.start(session._run)
        try:
            yield session
        finally:
            session._closing = True
            session._end(NetworkError("the session is closed", reason="router-stopping"))


def connect_sandbox_agent() -> AbstractAsyncContextManager[AgentSession]:
    """This sandbox's agent session: ``connect_agent`` with what the sandbox's boot contract gives
    (``SOCIETY_*`` variables, the router token in the secrets file). What an agent program that
    brings its own code (``byo(...)``) calls: ``async with connect_sandbox_agent() as s:``."""
    from society_sandbox.boot import BootConfig, Secrets

    config = BootConfig.from_environment()
    secrets = Secrets.read(config.secrets_file)
    return connect_agent(
        config.router_url,
        secrets.router_token,
        ca_file=config.router_ca_file,
        unix_path=config.router_socket,
        address=config.router_address,
    )
