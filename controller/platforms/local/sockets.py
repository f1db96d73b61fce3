"""The Unix sockets a local sandbox reaches the run through, and the relay to the model gateway.

A Unix socket's path may hold at most 107 bytes, and run directories are deeper than that; every
socket here is bound and connected through ``/proc/self/fd/<directory fd>/<name>``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import anyio
from anyio.abc import ByteStream

from controller.network.unix import UnixStream, serve_unix

SOCKETS_DIR = "sockets"
"""Under the run directory: the run's Unix sockets (``router.sock``, ``model-gateway.sock``)."""


class DirectoryHandle:
    """An open directory, so that its sockets have short paths as long as it stays open."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def path(self, name: str) -> str:
        return f"/proc/self/fd/{self._fd}/{name}"

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def bind_unix(directory: Path, name: str, *, mode: int = 0o600) -> socket.socket:
    """A listening Unix socket at ``directory/name`` (replacing a stale one), with ``mode``."""
    handle = DirectoryHandle(directory)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            os.unlink(handle.path(name))
        except FileNotFoundError:
            pass
        sock.bind(handle.path(name))
        os.chmod(handle.path(name), mode)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    finally:
        handle.close()
    return sock


async def relay_to_tcp(sock: socket.socket, host: str, port: int) -> None:
    """Accept on ``sock`` and carry each connection's bytes to ``host:port`` and back, until
    cancelled. For the model gateway only (a few calls per agent); the router serves its Unix
    socket natively."""
    try:
        async with anyio.create_task_group() as tasks:
            await serve_unix(sock, lambda client: _relay(client, host, port), tasks)
    finally:
        sock.close()


async def _relay(client: UnixStream, host: str, port: int) -> None:
    async with client:
        try:
            upstream = await anyio.connect_tcp(host, port)
        except OSError:
            return
        async with upstream, anyio.create_task_group() as tasks:
            tasks.start_soon(_pump, client, upstream, tasks.cancel_scope)
            await _pump(upstream, client, tasks.cancel_scope)


async def _pump(source: ByteStream, sink: ByteStream, scope: anyio.CancelScope) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
        await sink.send_eof()
        return
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    scope.cancel()
