"""The bridge inside an OpenClaw agent's sandbox: each of the controller's bridge connections is
spliced to OpenClaw's gateway port, so the controller speaks OpenClaw's own WebSocket RPC,
authenticated by OpenClaw's token."""

from __future__ import annotations

import anyio
from anyio.abc import ByteStream


async def pipe(client: ByteStream, host: str, port: int) -> None:
    """Splice ``client`` to ``host:port`` until either side closes; refused: close ``client``."""
    async with client:
        try:
            upstream = await anyio.connect_tcp(host, port)
        except OSError:
            return
        async with upstream, anyio.create_task_group() as tasks:

            async def copy(source: ByteStream, sink: ByteStream) -> None:
                try:
                    async for data in source:
                        await sink.send(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                tasks.cancel_scope.cancel()

            tasks.start_soon(copy, client, upstream)
            tasks.start_soon(copy, upstream, client)
