"""The owner-local API every shipped agent program serves on its bridge port.

Wire: one JSON object per line, over TCP. The first line must be
``{"op": "hello", "token": <bridge token>}``; after that each request
``{"id": n, "op": "state" | "instruct" | "stop" | "watch", ...}`` gets
``{"id": n, "ok": true, "result": ...}`` or ``{"id": n, "ok": false, "error": "..."}``.
``instruct`` carries ``text`` and may name ``peers``; ``stop`` may give a ``reason``.
A connection that sent ``watch`` is told ``{"event": "terminating", "outcome": "completed" |
"failed", "detail": ..., ...}`` just before the agent exits.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import SocketListener, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

MAX_LINE = 64 * 1024


@dataclass(frozen=True, slots=True)
class OwnerHandlers:
    """What the agent does for each owner request."""

    state: Callable[[], dict[str, Any]]
    instruct: Callable[[str, tuple[str, ...]], Awaitable[None]]
    stop: Callable[[str], None]


class OwnerGateway:
    """Serves the owner API on ``listener`` until cancelled; ``announce`` tells every watcher."""

    def __init__(self, listener: SocketListener, token: str, handlers: OwnerHandlers) -> None:
        self._listener = listener
        self._token = token.encode()
        self._handlers = handlers
        self._watchers: list[SocketStream] = []

    async def serve(self) -> None:
        async with self._listener:
            await self._listener.serve(self._connection)

    async def announce(self, frame: dict[str, Any]) -> None:
        line = _line({"event": "terminating", **frame})
        for stream in list(self._watchers):
            with anyio.move_on_after(1.0):
                try:
                    await stream.send(line)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass

    async def _connection(self, stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        try:
            async with stream:
                hello = json.loads(await reader.receive_until(b"\n", MAX_LINE))
                token = str(hello.get("token", "")).encode() if isinstance(hello, dict) else b""
                if hello.get("op") != "hello" or not hmac.compare_digest(token, self._token):
                    await stream.send(_line({"ok": False, "error": "unauthorized"}))
                    return
                await stream.send(_line({"ok": True}))
                while True:
                    request = json.loads(await reader.receive_until(b"\n", MAX_LINE))
                    await stream.send(_line(await self._answer(stream, request)))
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound, ValueError):
            pass
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            if stream in self._watchers:
                self._watchers.remove(stream)

    async def _answer(self, stream: SocketStream, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            return {"ok": False, "error": "a request is a JSON object"}
        reply: dict[str, Any] = {"id": request.get("id")}
        op = request.get("op")
        if op == "state":
            return {**reply, "ok": True, "result": self._handlers.state()}
        if op == "instruct":
            text, peers = request.get("text"), request.get("peers") or []
            if not isinstance(text, str) or not text.strip():
                return {**reply, "ok": False, "error": "instruct needs a non-empty string 'text'"}
            if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
                return {**reply, "ok": False, "error": "'peers' is a list of participant names"}
            await self._handlers.instruct(text, tuple(peers))
            return {**reply, "ok": True, "result": {"accepted": True}}
        if op == "stop":
            reason = request.get("reason") or "owner"
            self._handlers.stop(str(reason))
            return {**reply, "ok": True, "result": {"stopping": True}}
        if op == "watch":
            self._watchers.append(stream)
            return {**reply, "ok": True, "result": {"watching": True}}
        return {**reply, "ok": False, "error": f"unknown op {op!r}"}


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"
