"""Unix stream sockets as AnyIO byte streams, safe to cancel at any moment.

AnyIO's own Unix streams (``anyio.connect_unix``, a Unix ``SocketListener``) wait for readiness
on a future that the event loop's reader callback completes with ``set_result``. When the waiting
task is cancelled in the same loop iteration as its socket becomes readable, the callback finds a
cancelled future and the loop reports ``InvalidStateError`` (AnyIO 4.16 on asyncio; a
bridge torn down as its agent exits does exactly that). These streams wait with
``anyio.wait_readable`` / ``anyio.wait_writable``, whose callbacks tolerate a cancelled waiter.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup
from anyio.lowlevel import checkpoint

RECEIVE_BYTES = 65536
BACKLOG_RETRY_S = 0.01
"""How long a connect waits before trying again when the listener's backlog is full."""


class UnixStream(ByteStream):
    """One connected Unix stream socket; owns it (``aclose`` closes it)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._closed = False

    async def receive(self, max_bytes: int = RECEIVE_BYTES) -> bytes:
        while True:
            self._check_open()
            try:
                data = self._sock.recv(max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            await checkpoint()
            return data

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            self._check_open()
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[sent:]
        await checkpoint()

    async def send_eof(self) -> None:
        self._check_open()
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._sock)
            self._sock.close()
        await checkpoint()

    def _check_open(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError


async def connect_unix(path: str) -> UnixStream:
    """Connect to the Unix stream socket at ``path``; raises ``OSError`` like ``connect``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        while True:
            try:
                sock.connect(path)
                break
            except BlockingIOError:  # the listener's backlog is full: try again shortly
                await anyio.sleep(BACKLOG_RETRY_S)
    except BaseException:
        sock.close()
        raise
    return UnixStream(sock)


async def serve_unix(
    listener: socket.socket,
    handler: Callable[[UnixStream], Coroutine[Any, Any, None]],
    tasks: TaskGroup,
) -> None:
    """Accept on the listening Unix socket until cancelled, each connection handled in ``tasks``
    (the handler owns the stream). The listener stays the caller's to close."""
    listener.setblocking(False)
    while True:
        try:
            client, _ = listener.accept()
        except BlockingIOError:
            await anyio.wait_readable(listener)
            continue
        except OSError:  # out of descriptors, or a connection reset before it was accepted
            await anyio.sleep(BACKLOG_RETRY_S)
            continue
        tasks.start_soon(handler, UnixStream(client))


__all__ = ["BACKLOG_RETRY_S", "RECEIVE_BYTES", "UnixStream", "connect_unix", "serve_unix"]
