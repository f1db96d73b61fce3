"""The stdio mode: the launcher is the agent's router session; the program speaks JSON lines.

Each delivery becomes a ``message`` line on the program's stdin; each ``send`` or ``open`` line
the program writes on its stdout is done through the session and answered (``sent``,
``opened``, or ``error`` with a reason). A line that is not such a frame is answered with an
``error`` and logged; the program keeps running.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import ValidationError

from agent_images.router_session import say
from society_sandbox.network.errors import NetworkError
from society_sandbox.runtimes.byo import (
    FROM_PROGRAM,
    MAX_LINE_BYTES,
    ErrorFrame,
    HelloFrame,
    MessageFrame,
    OpenedFrame,
    OpenRequest,
    SendRequest,
    SentFrame,
    ToProgram,
)

PROGRAM = "byo"


@dataclass(eq=False)
class StdioChannel:
    """The program's stdin (frames to it) and the counters the owner handle shows."""

    stdin: ByteSendStream
    received: int = 0
    sent: int = 0
    refused_lines: int = 0
    closed: bool = False
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def write(self, frame: ToProgram) -> None:
        """One line on the program's stdin; nothing once it closed its end (or exited)."""
        if self.closed:
            return
        line = frame.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n"
        async with self._lock:
            try:
                await self.stdin.send(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.closed = True

    async def close(self) -> None:
        self.closed = True
        try:
            await self.stdin.aclose()
        except (anyio.BrokenResourceError, OSError):
            pass


async def greet(channel: StdioChannel, session: Any) -> None:
    await channel.write(HelloFrame(name=session.identity.name, participantId=session.identity.id))


async def deliver(channel: StdioChannel, session: Any) -> None:
    """Every delivery, as a ``message`` line."""
    async for delivery in session.deliveries():
        channel.received += 1
        await channel.write(
            MessageFrame.model_validate(
                {
                    "from": delivery.sender.name,
                    "conversation": delivery.conversation_id,
                    "participants": tuple(p.name for p in delivery.participants),
                    "text": delivery.text,
                    "messageId": delivery.message_id,
                }
            )
        )


async def relay_requests(channel: StdioChannel, session: Any, stdout: ByteReceiveStream) -> None:
    """Every line of the program's stdout, done through the session and answered."""
    reader = BufferedByteReceiveStream(stdout)
    conversations: dict[tuple[str, ...], str] = {}
    while True:
        try:
            line = await reader.receive_until(b"\n", MAX_LINE_BYTES)
        except anyio.DelimiterNotFound:
            await _refuse(channel, None, "too-long", f"a line holds at most {MAX_LINE_BYTES} bytes")
            return  # the rest of that line cannot be told from the next: stop reading
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
            return
        if not line.strip():
            continue
        try:
            request = FROM_PROGRAM.validate_json(line)
        except ValidationError as exc:
            shown = line[:200].decode(errors="replace")
            say(PROGRAM, f"stdout line is not a frame: {shown}")
            await _refuse(channel, _request_id(line), "malformed-frame", _first_error(exc))
            continue
        try:
            if isinstance(request, OpenRequest):
                ref = await session.open(*request.to)
                conversations.setdefault(tuple(sorted(request.to)), ref.conversation_id)
                await channel.write(
                    OpenedFrame(
                        id=request.id,
                        conversation=ref.conversation_id,
                        participants=tuple(p.name for p in ref.participants),
                    )
                )
            else:
                await _send(channel, session, request, conversations)
        except NetworkError as exc:
            await _refuse(channel, request.id, exc.reason, exc.detail)
        except ValidationError as exc:  # a name the wire protocol does not allow
            await _refuse(channel, request.id, "malformed-frame", _first_error(exc))


async def _send(
    channel: StdioChannel,
    session: Any,
    request: SendRequest,
    conversations: dict[tuple[str, ...], str],
) -> None:
    conversation = request.conversation
    if conversation is None:
        if not request.to:
            await _refuse(channel, request.id, "bad-frame", "a send names 'conversation' or 'to'")
            return
        key = tuple(sorted(request.to))
        conversation = conversations.get(key)
        if conversation is None:
            ref = await session.open(*request.to)
            conversation = conversations[key] = ref.conversation_id
    ack = await session.send(conversation, request.text)
    channel.sent += 1
    await channel.write(
        SentFrame(id=request.id, conversation=conversation, messageId=ack.message_id)
    )


async def _refuse(channel: StdioChannel, request_id: str | None, reason: str, message: str) -> None:
    channel.refused_lines += 1
    await channel.write(ErrorFrame(id=request_id, reason=reason, message=message))


def _request_id(line: bytes) -> str | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    found = value.get("id") if isinstance(value, dict) else None
    return found if isinstance(found, str) and len(found) <= 128 else None


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))
