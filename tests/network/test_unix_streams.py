"""Unix streams between the controller and a sandbox: bytes both ways, and cancellation that
lands in the same loop iteration as the socket's readiness leaves the event loop clean."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from controller.network.unix import UnixStream, connect_unix, serve_unix

pytestmark = pytest.mark.anyio


def _loop_errors() -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


async def _cancelled_at_readiness(
    operation: Callable[[UnixStream], Awaitable[object]],
    make_ready: Callable[[socket.socket], object],
) -> tuple[anyio.CancelScope, list[dict[str, Any]]]:
    """Run ``operation`` on one end of a socket pair until it waits, make that wait end
    (``make_ready`` on the other end) and cancel it just before the loop's next poll; returns
    the operation's scope and what the loop reported meanwhile."""
    ours, theirs = socket.socketpair()
    errors = _loop_errors()
    stream = UnixStream(ours)
    async with stream, anyio.create_task_group() as tasks:
        scope = anyio.CancelScope()

        async def wait() -> None:
            with scope:
                await operation(stream)

        tasks.start_soon(wait)
        await anyio.sleep(0.05)  # the operation waits
        make_ready(theirs)  # ready at the next poll...
        asyncio.get_running_loop().call_soon(scope.cancel)  # ...and cancelled just before it
        await anyio.sleep(0.05)
    theirs.close()
    return scope, errors


async def _flood(stream: UnixStream) -> None:
    while True:
        await stream.send(b"x" * 65536)


def _drain(sock: socket.socket) -> None:
    sock.setblocking(False)
    while True:
        try:
            sock.recv(1 << 20)
        except BlockingIOError:
            return


async def test_a_read_cancelled_as_its_socket_becomes_readable_leaves_no_loop_error() -> None:
    scope, errors = await _cancelled_at_readiness(
        lambda stream: stream.receive(), lambda sock: sock.send(b"x")
    )
    assert scope.cancelled_caught
    assert [str(error.get("exception")) for error in errors] == []


async def test_a_write_cancelled_as_its_socket_becomes_writable_leaves_no_loop_error() -> None:
    scope, errors = await _cancelled_at_readiness(_flood, _drain)
    assert scope.cancelled_caught
    assert [str(error.get("exception")) for error in errors] == []


async def test_a_served_unix_socket_carries_bytes_both_ways_and_ends_with_eof(
    tmp_path: Path,
) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "echo.sock"))
    listener.listen(8)

    async def echo(client: UnixStream) -> None:
        async with client:
            async for chunk in client:
                await client.send(chunk.upper())
            await client.send_eof()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(serve_unix, listener, echo, tasks)
        async with await connect_unix(str(tmp_path / "echo.sock")) as stream:
            payload = b"society " * 40_000  # larger than one socket buffer
            async with anyio.create_task_group() as pair:
                pair.start_soon(stream.send, payload)
                received = b""
                while len(received) < len(payload):
                    received += await stream.receive()
            await stream.send_eof()
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
        assert received == payload.upper()
        tasks.cancel_scope.cancel()
    listener.close()


async def test_a_closed_stream_refuses_and_a_missing_socket_is_an_os_error(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    stream = UnixStream(ours)
    await stream.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await stream.receive()
    with pytest.raises(anyio.ClosedResourceError):
        await stream.send(b"x")
    theirs.close()
    with pytest.raises(OSError):
        await connect_unix(str(tmp_path / "nobody-listens.sock"))


async def test_a_peer_that_goes_away_mid_send_is_a_broken_resource() -> None:
    ours, theirs = socket.socketpair()
    theirs.close()
    async with UnixStream(ours) as stream:
        with pytest.raises(anyio.BrokenResourceError):
            await stream.send(b"x" * 1_000_000)
