"""Unix streams between the controller and a sandbox: bytes both ways, and cancellation that
lands in the same loop iteration as the socket's readiness leaves the event loop clean."""

from __future__ import annotations

import asyncio
import socket
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


async def test_a_read_cancelled_as_its_socket_becomes_readable_leaves_no_loop_error() -> None:
    ours, theirs = socket.socketpair()
    errors = _loop_errors()
    stream = UnixStream(ours)
    async with stream, anyio.create_task_group() as tasks:
        scope = anyio.CancelScope()

        async def read() -> None:
            with scope:
                await stream.receive()

        tasks.start_soon(read)
        await anyio.sleep(0.05)
        theirs.send(b"x")  # readable at the next poll...
        asyncio.get_running_loop().call_soon(scope.cancel)  # ...and cancelled just before it
        await anyio.sleep(0.05)
    theirs.close()
    assert scope.cancelled_caught
    assert [str(error.get("exception")) for error in errors] == []


async def test_a_write_cancelled_as_its_socket_becomes_writable_leaves_no_loop_error() -> None:
    ours, theirs = socket.socketpair()
    errors = _loop_errors()
    stream = UnixStream(ours)
    async with stream, anyio.create_task_group() as tasks:
        scope = anyio.CancelScope()

        async def flood() -> None:
            with scope:
                while True:
                    await stream.send(b"x" * 65536)

        tasks.start_soon(flood)
        await anyio.sleep(0.05)  # the buffer is full and the sender waits
        theirs.setblocking(False)
        while True:  # drain: writable at the next poll...
            try:
                theirs.recv(1 << 20)
            except BlockingIOError:
                break
        asyncio.get_running_loop().call_soon(scope.cancel)  # ...and cancelled just before it
        await anyio.sleep(0.05)
    theirs.close()
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
