"""Two byte paths inside an OpenClaw agent's sandbox.

- ``ModelRelay``: OpenClaw's ``openai-completions`` provider always streams, and the run's model
  gateway answers whole completions only. The relay listens on loopback, adds the agent's own
  gateway token, forwards each chat completion with ``"stream": false`` and, when OpenClaw asked
  for a stream, replays the answer as server-sent events (one content chunk, one final chunk with
  the usage, ``[DONE]``). The gateway still measures every call.
- ``pipe``: the controller's bridge connection is spliced to OpenClaw's gateway port, so the
  controller speaks OpenClaw's own WebSocket RPC, authenticated by OpenClaw's token.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
from anyio.abc import ByteStream, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from agent_images.http_relay import read_request, response


class ModelRelay:
    """Serves ``http://127.0.0.1:<port>/v1`` in front of the run's model gateway."""

    def __init__(self, base_url: str, token: str, *, unix_socket: str | None = None) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/").removesuffix("/v1"),
            transport=httpx.AsyncHTTPTransport(uds=unix_socket) if unix_socket else None,
            headers={"authorization": f"Bearer {token}"},
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
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async def _exchange(self, stream: SocketStream, reader: BufferedByteReceiveStream) -> None:
        """One request, one answer, then the connection closes (clients reconnect)."""
        request = await read_request(reader)
        if request is None:
            await stream.send(response(413, b'{"error":{"message":"body too large"}}'))
            return
        method, path, body = request.method, request.target, request.body
        if method == "POST" and path.endswith("/chat/completions"):
            await self._completion(stream, body)
            return
        upstream = await self._client.request(method, path, content=body or None)
        await stream.send(response(upstream.status_code, upstream.content))

    async def _completion(self, stream: SocketStream, body: bytes) -> None:
        try:
            request = json.loads(body)
        except ValueError:
            await stream.send(response(400, b'{"error":{"message":"body is not JSON"}}'))
            return
        streamed = bool(request.pop("stream", False))
        request.pop("stream_options", None)
        self.calls += 1
        try:
            upstream = await self._client.post("/v1/chat/completions", json=request)
        except httpx.HTTPError as exc:
            message = json.dumps({"error": {"message": f"model gateway unreachable: {exc}"}})
            await stream.send(response(502, message.encode()))
            return
        if upstream.status_code != 200 or not streamed:
            await stream.send(response(upstream.status_code, upstream.content))
            return
        await stream.send(_sse_head())
        for chunk in _as_chunks(upstream.json()):
            await stream.send(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await stream.send(b"data: [DONE]\n\n")


def _as_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    base = {
        "id": completion.get("id") or "relay",
        "object": "chat.completion.chunk",
        "created": completion.get("created") or int(time.time()),
        "model": completion.get("model") or "",
    }
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message["tool_calls"])]
    return [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {
            **base,
            "choices": [
                {"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}
            ],
            "usage": completion.get("usage"),
        },
    ]


def _sse_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"connection: close\r\n\r\n"
    )


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
