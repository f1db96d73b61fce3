"""NanoClaw's contract on the bridge socket: the owner's way to the agent (``NanoClawOwner``).

Wire, one connection per owner session:

- the owner's first line is ``{"token": <bridge token>}`` (at most ``MAX_HELLO_LINE`` bytes),
  checked before anything else is read; the agent answers ``{"ok": true, "sdkVersion",
  "nodeVersion"}`` or ``{"ok": false, "reason": "unauthorized"}`` and closes;
- then the owner writes NanoClaw's frames, one JSON line each: first the session's input
  (``{"prompt": ...}``, as NanoClaw's host writes a container's stdin), then follow-ups
  (``{"type": "message", "text": ...}``, NanoClaw's IPC input files) and at last
  ``{"type": "close"}`` (NanoClaw's ``_close`` file);
- the agent writes each output of that session as NanoClaw delimits it: a
  ``---NANOCLAW_OUTPUT_START---`` line, one JSON object, a ``---NANOCLAW_OUTPUT_END---`` line.

A malformed frame gets one error output and ends that connection only.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

from society_sandbox.owner_api import MAX_LINE, MalformedLine, decode_line, receive_line
from society_sandbox.runtimes.nanoclaw import NODE_VERSION, OUTPUT_END, OUTPUT_START, SDK_VERSION

MAX_HELLO_LINE = 1024
HELLO_TIMEOUT_S = 10.0

OwnerSession = Callable[[str, "OwnerChannel"], Awaitable[None]]
"""Runs one owner session: its first prompt and the channel it reads follow-ups from."""


class OwnerChannel:
    """One authenticated owner connection: frames in, NanoClaw-delimited outputs out."""

    def __init__(self, stream: ByteStream, reader: BufferedByteReceiveStream) -> None:
        self._stream = stream
        self._reader = reader

    async def write(self, output: dict[str, Any]) -> None:
        block = f"{OUTPUT_START}\n{json.dumps(output)}\n{OUTPUT_END}\n"
        await self._stream.send(block.encode())

    async def frame(self) -> dict[str, Any] | None:
        """The next frame, or ``None`` when the owner closed the connection."""
        try:
            line = await receive_line(self._reader, MAX_LINE)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            return None
        except anyio.DelimiterNotFound:
            raise MalformedLine(f"a frame is one line of at most {MAX_LINE} bytes") from None
        return decode_line(line)


async def serve_owner(stream: ByteStream, token: str, session: OwnerSession) -> None:
    """Serve one owner connection: the token first, then one session of NanoClaw frames."""
    reader = BufferedByteReceiveStream(stream)
    async with stream:
        try:
            with anyio.fail_after(HELLO_TIMEOUT_S):
                hello = decode_line(await receive_line(reader, MAX_HELLO_LINE), max_depth=1)
            offered = hello.get("token")
            if not isinstance(offered, str) or not hmac.compare_digest(
                offered.encode(), token.encode()
            ):
                await _answer(stream, {"ok": False, "reason": "unauthorized"})
                return
            await _answer(
                stream, {"ok": True, "sdkVersion": SDK_VERSION, "nodeVersion": NODE_VERSION}
            )
            channel = OwnerChannel(stream, reader)
            first = await channel.frame()
            if first is None:
                return
            prompt = first.get("prompt")
            if not isinstance(prompt, str) or not prompt:
                raise MalformedLine('the first frame is the session input: {"prompt": "..."}')
            await session(prompt, channel)
        except MalformedLine as bad:
            await _try_write(stream, {"status": "error", "result": None, "error": str(bad)})
        except (TimeoutError, anyio.DelimiterNotFound, anyio.EndOfStream, anyio.IncompleteRead):
            pass
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass


async def _answer(stream: ByteStream, line: dict[str, Any]) -> None:
    await stream.send(json.dumps(line).encode() + b"\n")


async def _try_write(stream: ByteStream, output: dict[str, Any]) -> None:
    try:
        await OwnerChannel(stream, BufferedByteReceiveStream(stream)).write(output)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
