"""The model relay inside a NanoClaw agent's sandbox: the CLI's ``ANTHROPIC_BASE_URL``.

It listens on loopback, adds the agent's own gateway token as ``x-api-key`` and forwards each
request to the run's model gateway (through ``MODEL_GATEWAY_SOCKET`` in a local sandbox, which has
no other way out), then hands back the gateway's answer as it came. The CLI holds only a dummy
key, never the token and never a provider key; the gateway measures every call.
"""

from __future__ import annotations

import json

import anyio
import httpx
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from agent_images.http_relay import read_request, response

_PASSED_HEADERS = ("content-type", "anthropic-version", "anthropic-beta")


class ModelRelay:
    """Serves ``http://127.0.0.1:<port>`` in front of the run's model gateway."""

    def __init__(self, base_url: str, token: str, *, unix_socket: str | None = None) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/").removesuffix("/v1"),
            transport=httpx.AsyncHTTPTransport(uds=unix_socket) if unix_socket else None,
            headers={"x-api-key": token},
            timeout=httpx.Timeout(600.0, connect=10.0),
        )
        self.calls = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def serve(self, stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            try:
                await self._exchange(stream, reader)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
                pass
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, ValueError):
                pass

    async def _exchange(self, stream: SocketStream, reader: BufferedByteReceiveStream) -> None:
        """One request, one answer, then the connection closes (clients reconnect)."""
        request = await read_request(reader)
        if request is None:
            await stream.send(response(413, b'{"type":"error"}'))
            return
        method, target, headers, body = (
            request.method,
            request.target,
            request.headers,
            request.body,
        )
        self.calls += 1
        forwarded = {name: headers[name] for name in _PASSED_HEADERS if name in headers}
        try:
            upstream = await self._client.request(
                method, target, content=body or None, headers=forwarded
            )
        except httpx.HTTPError as exc:
            error = {"type": "api_error", "message": f"model gateway unreachable: {exc!r}"}
            message = json.dumps({"type": "error", "error": error}).encode()
            await stream.send(response(502, message))
            return
        content_type = upstream.headers.get("content-type", "application/json")
        await stream.send(response(upstream.status_code, upstream.content, content_type))
