"""``NanoClawOwner``: the owner's handle on a NanoClaw agent, NanoClaw's own contract, typed.

The owner opens a session over the agent's bridge socket (its token checked first), writes the
session's prompt, then follow-ups, and reads each output as NanoClaw delimits it
(``---NANOCLAW_OUTPUT_START---``, one JSON object, ``---NANOCLAW_OUTPUT_END---``); closing the
session is NanoClaw's ``_close``. The wire is the agent program's owner channel.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.agents.bridge import OwnerError
from controller.network.unix import connect_unix
from society_sandbox.runtimes.nanoclaw import OUTPUT_END, OUTPUT_START

MAX_OUTPUT = 1024 * 1024


class NanoClawOwnerError(OwnerError):
    """The agent's NanoClaw contract refused or broke; ``reason`` is machine-readable."""

    reason = "nanoclaw-owner"


class SentMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str


class NanoClawOutput(BaseModel):
    """One output of a session: a result, or a ``send_message`` call (``send_message`` set)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    status: Literal["success", "error"]
    result: str | None = None
    new_session_id: str | None = Field(default=None, alias="newSessionId")
    error: str | None = None
    send_message: SentMessage | None = Field(default=None, alias="sendMessage")


class NanoClawSession:
    """One open session: ``follow_up``, ``outputs``/``result``, ``close``."""

    def __init__(self, stream: ByteStream, reader: BufferedByteReceiveStream) -> None:
        self._stream = stream
        self._reader = reader

    async def follow_up(self, text: str) -> None:
        """One more user message in the open session (NanoClaw's IPC input file)."""
        await _send_line(self._stream, {"type": "message", "text": text})

    async def close(self) -> None:
        """End the session (NanoClaw's ``_close``); its outputs still arrive until it ends."""
        try:
            await _send_line(self._stream, {"type": "close"})
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    async def outputs(self) -> AsyncIterator[NanoClawOutput]:
        """Each output, in order, until the session ends."""
        inside: list[bytes] | None = None
        while True:
            try:
                line = (await self._reader.receive_until(b"\n", MAX_OUTPUT)).strip()
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                return
            if line == OUTPUT_START.encode():
                inside = []
            elif line == OUTPUT_END.encode() and inside is not None:
                yield _decode(b"\n".join(inside))
                inside = None
            elif inside is not None:
                inside.append(line)

    async def result(self, *, timeout_s: float = 300.0) -> NanoClawOutput:
        """The next result (``send_message`` calls before it are skipped)."""
        with anyio.fail_after(timeout_s):
            async for output in self.outputs():
                if output.send_message is None:
                    return output
        raise NanoClawOwnerError("the session ended before a result", reason="session-ended")


class NanoClawOwner:
    """How the owner reaches one NanoClaw agent: ``async with owner.session(prompt) as s``."""

    def __init__(self, token: str, *, unix_path: str | None, host: str, port: int) -> None:
        self._token = token
        self._unix_path = unix_path
        self._host = host
        self._port = port

    @asynccontextmanager
    async def session(self, prompt: str) -> AsyncIterator[NanoClawSession]:
        """Open a session whose first message is ``prompt``; leaving the block closes it."""
        async with await self._connect() as stream:
            reader = BufferedByteReceiveStream(stream)
            await self._hello(stream, reader)
            await _send_line(stream, {"prompt": prompt})
            session = NanoClawSession(stream, reader)
            try:
                yield session
            finally:
                with anyio.CancelScope(shield=True):
                    await session.close()

    async def hello(self) -> dict[str, Any]:
        """Check the token and return the agent's versions: the readiness probe."""
        async with await self._connect() as stream:
            return await self._hello(stream, BufferedByteReceiveStream(stream))

    async def _connect(self) -> ByteStream:
        try:
            if self._unix_path is not None:
                return await connect_unix(self._unix_path)
            return await anyio.connect_tcp(self._host, self._port)
        except OSError as exc:
            raise NanoClawOwnerError(
                f"cannot reach the agent's bridge: {exc}", reason="unreachable"
            ) from None

    async def _hello(self, stream: ByteStream, reader: BufferedByteReceiveStream) -> dict[str, Any]:
        try:
            with anyio.fail_after(10):
                await _send_line(stream, {"token": self._token})
                answer = json.loads(await reader.receive_until(b"\n", 4096))
        except (TimeoutError, ValueError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            raise NanoClawOwnerError(
                f"the agent's bridge gave no answer ({type(exc).__name__})", reason="no-answer"
            ) from None
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            raise NanoClawOwnerError(
                "the agent's bridge refused the token; use the run's bridge token",
                reason="unauthorized",
            )
        return answer


async def _send_line(stream: ByteStream, frame: dict[str, Any]) -> None:
    await stream.send(json.dumps(frame).encode() + b"\n")


def _decode(block: bytes) -> NanoClawOutput:
    try:
        return NanoClawOutput.model_validate_json(block)
    except ValidationError as exc:
        raise NanoClawOwnerError(
            f"the agent wrote an output NanoClaw's contract does not allow: {exc.errors()[:1]}",
            reason="bad-output",
        ) from None
