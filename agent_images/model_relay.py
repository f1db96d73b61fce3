"""The model relay inside an agent's sandbox: its model client's endpoint on loopback.

The relay adds the agent's own gateway token and forwards each request to the run's model gateway
(through ``MODEL_GATEWAY_SOCKET`` in a local sandbox, which has no other way out), then hands back
the gateway's answer. The client holds only a dummy key, never the token and never a provider
key; the gateway measures every call. What differs between model APIs (the token's header, the
headers passed on, the error body, whether a stream is replayed) is a ``ModelAPI``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from agent_images.http_relay import read_request, response


@dataclass(frozen=True, slots=True)
class ModelAPI:
    """How one model API's client reaches the gateway through the relay."""

    call_path: str
    """The path of a model call (what ``ModelRelay.calls`` counts)."""
    token_header: str
    token_scheme: str
    """Written before the token in ``token_header`` (``"Bearer "``, or nothing)."""
    passed_headers: tuple[str, ...]
    """The client's request headers passed on to the gateway (lower-cased)."""
    error: Callable[[str], dict[str, Any]]
    """The API's error body around a message."""
    replays_streams: bool = False
    """The client always streams and the gateway answers whole calls only: a call is forwarded
    with ``"stream": false`` and a streamed answer replayed as server-sent events (one content
    chunk, one final chunk with the usage, ``[DONE]``)."""


ANTHROPIC_MESSAGES = ModelAPI(
    call_path="/v1/messages",
    token_header="x-api-key",
    token_scheme="",
    passed_headers=("content-type", "anthropic-version", "anthropic-beta"),
    error=lambda message: {"type": "error", "error": {"type": "api_error", "message": message}},
)
"""Anthropic Messages: NanoClaw's CLI (its ``ANTHROPIC_BASE_URL``)."""
OPENAI_COMPLETIONS = ModelAPI(
    call_path="/v1/chat/completions",
    token_header="authorization",
    token_scheme="Bearer ",
    passed_headers=("content-type",),
    error=lambda message: {"error": {"message": message}},
    replays_streams=True,
)
"""OpenAI chat completions: OpenClaw's ``openai-completions`` provider, which always streams."""


class ModelRelay:
    """Serves ``http://127.0.0.1:<port>`` in front of the run's model gateway, for ``api``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        api: ModelAPI,
        unix_socket: str | None = None,
        model: str | None = None,
    ) -> None:
        self._api = api
        self._model = model
        """Set: every call asks for this model, whatever the client named (a stock SDK's
        program names a provider's model; the agent is granted one)."""
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/").removesuffix("/v1"),
            transport=httpx.AsyncHTTPTransport(uds=unix_socket) if unix_socket else None,
            headers={api.token_header: f"{api.token_scheme}{token}"},
            timeout=httpx.Timeout(600.0, connect=10.0),
        )
        self.calls = 0
        """Model calls forwarded so far."""

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
            await stream.send(self._error(413, "body too large"))
            return
        passed = self._api.passed_headers
        headers = {name: request.headers[name] for name in passed if name in request.headers}
        body, streamed = request.body, False
        path = request.target.partition("?")[0]
        if request.method == "POST" and path.endswith(self._api.call_path):
            self.calls += 1
            if self._api.replays_streams or self._model is not None:
                asked = _json_object(body)
                if asked is None:
                    await stream.send(self._error(400, "body is not a JSON object"))
                    return
                if self._api.replays_streams:
                    streamed = bool(asked.pop("stream", False))
                    asked.pop("stream_options", None)
                if self._model is not None:
                    asked["model"] = self._model
                body, headers["content-type"] = json.dumps(asked).encode(), "application/json"
        try:
            upstream = await self._client.request(
                request.method, request.target, content=body or None, headers=headers
            )
        except httpx.HTTPError as exc:
            await stream.send(self._error(502, f"model gateway unreachable: {exc!r}"))
            return
        if streamed and upstream.status_code == 200:
            await stream.send(_sse_head())
            for chunk in _as_chunks(upstream.json()):
                await stream.send(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await stream.send(b"data: [DONE]\n\n")
            return
        content_type = upstream.headers.get("content-type", "application/json")
        await stream.send(response(upstream.status_code, upstream.content, content_type))

    def _error(self, status: int, message: str) -> bytes:
        return response(status, json.dumps(self._api.error(message)).encode())


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


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
