"""The owner-local API every shipped agent program serves on its bridge port.

Wire: one JSON object per line, over TCP. The first line must be
``{"op": "hello", "token": <bridge token>}``; after that each request
``{"id": n, "op": "state" | "instruct" | "stop" | "watch", ...}`` gets
``{"id": n, "ok": true, "result": ...}`` or
``{"id": n, "ok": false, "error": "...", "reason": <code>}``.
``instruct`` carries ``text`` and may name ``peers``; ``stop`` may give a ``reason``. A
read-only agent (an evaluation peer) offers neither: both are refused with ``not-offered``. A
program that cannot start serves the API only to refuse ``state`` with why (``OwnerRefusal``):
its readiness check then reports the program's own reason.
A connection that sent ``watch`` is told ``{"event": "terminating", "outcome": "completed" |
"failed", "detail": ..., ...}`` just before the agent exits.

Whatever a peer sends, only its own connection ends: the hello line is at most
``MAX_HELLO_LINE`` bytes and flat, a request line at most ``MAX_LINE`` bytes and
``MAX_DEPTH`` levels deep, and a malformed one gets a typed refusal.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import SocketListener, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

MAX_LINE = 64 * 1024
MAX_HELLO_LINE = 1024
"""The hello carries a token only; nothing longer is read before the token is checked."""
MAX_DEPTH = 8
"""Nesting of arrays and objects a line may have (a request needs 2)."""
HELLO_TIMEOUT_S = 10.0

_log = logging.getLogger("society_sandbox.owner_api")
# A string, possibly unterminated; possessive, so each byte is looked at once (no backtracking).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.?)*+"?', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[{]}")
_PARENS = bytes.maketrans(b"[{]}", b"(())")


class MalformedLine(ValueError):
    """A line that is not one JSON object within the limits; ``reason`` is machine-readable."""

    def __init__(self, detail: str, *, reason: str = "malformed-request") -> None:
        super().__init__(detail)
        self.reason = reason


def decode_line(line: bytes, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """One JSON object from ``line``, refused before parsing when it nests deeper than allowed."""
    if not _nests_within(line, max_depth):
        raise MalformedLine(
            f"a line nests at most {max_depth} arrays or objects deep, with balanced brackets"
        )
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: not reachable past _depth
        raise MalformedLine(f"a line is one JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedLine("a line is one JSON object")
    return value


async def receive_line(reader: BufferedByteReceiveStream, max_bytes: int) -> bytes:
    """The next line, at most ``max_bytes`` long (``anyio`` alone may return a longer one that
    arrived in the same read); raises ``DelimiterNotFound`` past it."""
    line = await reader.receive_until(b"\n", max_bytes)
    if len(line) > max_bytes:
        raise anyio.DelimiterNotFound(max_bytes)
    return line


def _nests_within(line: bytes, max_depth: int) -> bool:
    """Whether the brackets outside strings nest at most ``max_depth`` deep (or do not balance,
    which the parser then refuses). Each pass removes the innermost pairs: C-speed, no recursion.
    """
    if line.count(b"[") + line.count(b"{") <= max_depth:
        return True
    brackets = _STRING.sub(b"", line).translate(_PARENS, _NOT_BRACKETS)
    for _ in range(max_depth):
        if not brackets:
            return True
        brackets = brackets.replace(b"()", b"")
    return not brackets


class OwnerRefusal(Exception):
    """Raised by a handler to refuse the request: the answer is ``{"ok": false, "error": <the
    message>, "reason": reason}``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class OwnerHandlers:
    """What the agent does for each owner request; ``None``: the request is not offered."""

    state: Callable[[], dict[str, Any]]
    instruct: Callable[[str, tuple[str, ...]], Awaitable[None]] | None = None
    stop: Callable[[str], None] | None = None


class OwnerApiServer:
    """Serves the owner API on ``listener`` until cancelled; ``announce`` tells every watcher."""

    def __init__(self, listener: SocketListener, token: str, handlers: OwnerHandlers) -> None:
        self._listener = listener
        self._token = token.encode()
        self._handlers = handlers
        self._watchers: list[SocketStream] = []
        self.refused = anyio.Event()
        """Set once a handler's refusal (``OwnerRefusal``) was sent."""

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
                if not await self._hello(stream, reader):
                    return
                while True:
                    try:
                        request = decode_line(await receive_line(reader, MAX_LINE))
                    except MalformedLine as exc:
                        await stream.send(_refusal(None, str(exc), exc.reason))
                        continue
                    try:
                        answer = await self._answer(stream, request)
                    except OwnerRefusal as exc:
                        await stream.send(_refusal(request.get("id"), str(exc), exc.reason))
                        self.refused.set()
                        continue
                    await stream.send(_line(answer))
        except anyio.DelimiterNotFound:
            await _try_send(stream, _refusal(None, f"a line holds at most {MAX_LINE} bytes"))
        except (anyio.EndOfStream, anyio.IncompleteRead, TimeoutError):
            pass
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        except Exception:  # a bug answering one peer must not end the agent
            _log.exception("owner connection failed; closing it, the agent keeps running")
        finally:
            if stream in self._watchers:
                self._watchers.remove(stream)

    async def _hello(self, stream: SocketStream, reader: BufferedByteReceiveStream) -> bool:
        """Check the token on a short, flat first line before reading anything else."""
        try:
            with anyio.fail_after(HELLO_TIMEOUT_S):
                hello = decode_line(await receive_line(reader, MAX_HELLO_LINE), max_depth=1)
        except (MalformedLine, anyio.DelimiterNotFound):
            hello = {}
        token = hello.get("token")
        token_bytes = token.encode() if isinstance(token, str) else b""
        if hello.get("op") != "hello" or not hmac.compare_digest(token_bytes, self._token):
            await stream.send(_refusal(None, "unauthorized", "unauthorized", with_id=False))
            return False
        await stream.send(_line({"ok": True}))
        return True

    async def _answer(self, stream: SocketStream, request: dict[str, Any]) -> dict[str, Any]:
        request_id = request.get("id")
        if not isinstance(request_id, int | str | None) or isinstance(request_id, bool):
            return _error({"id": None}, "'id' is a number or a string", "bad-field")
        reply: dict[str, Any] = {"id": request_id}
        op = request.get("op")
        offered = {"instruct": self._handlers.instruct, "stop": self._handlers.stop}
        if isinstance(op, str) and op in offered and offered[op] is None:
            return _error(
                reply, f"this agent's bridge is read-only: {op!r} is not offered", "not-offered"
            )
        if op == "state":
            return {**reply, "ok": True, "result": self._handlers.state()}
        if op == "instruct":
            text, peers = request.get("text"), request.get("peers") or []
            if not isinstance(text, str) or not text.strip() or not _unicode(text):
                return _error(reply, "instruct needs a non-empty string 'text'", "bad-field")
            if not isinstance(peers, list) or not all(
                isinstance(p, str) and _unicode(p) for p in peers
            ):
                return _error(reply, "'peers' is a list of participant names", "bad-field")
            assert self._handlers.instruct is not None
            await self._handlers.instruct(text, tuple(peers))
            return {**reply, "ok": True, "result": {"accepted": True}}
        if op == "stop":
            reason = request.get("reason") or "owner"
            assert self._handlers.stop is not None
            self._handlers.stop(reason if isinstance(reason, str) else "owner")
            return {**reply, "ok": True, "result": {"stopping": True}}
        if op == "watch":
            self._watchers.append(stream)
            return {**reply, "ok": True, "result": {"watching": True}}
        shown = op if isinstance(op, str) else type(op).__name__
        return _error(reply, f"unknown op {shown[:64]!r}", "unknown-op")


def _unicode(text: str) -> bool:
    """Whether ``text`` can travel on (UTF-8 only: no lone surrogates, which JSON escapes allow)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _error(reply: dict[str, Any], message: str, reason: str) -> dict[str, Any]:
    return {**reply, "ok": False, "error": message, "reason": reason}


def _refusal(
    request_id: object, message: str, reason: str = "malformed-request", *, with_id: bool = True
) -> bytes:
    body: dict[str, Any] = {"id": request_id} if with_id else {}
    return _line(_error(body, message, reason))


async def _try_send(stream: SocketStream, line: bytes) -> None:
    try:
        await stream.send(line)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"
