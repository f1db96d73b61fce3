"""A client of OpenClaw's gateway RPC: WebSocket frames ``{type: req|res|event}``, protocol 4.

The gateway sends ``connect.challenge``; the client answers ``connect`` with the gateway token as a
trusted local backend (``client.id: gateway-client``, ``mode: backend``: on loopback the token
alone suffices, no device pairing). Then ``call(method, params)`` sends a request and returns its
payload. The agent program and the controller's roster handle both use it, over loopback or the
sandbox's bridge socket.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidMessage

PROTOCOL = 4
CLIENT = {"id": "gateway-client", "version": "society", "platform": "linux", "mode": "backend"}
SCOPES = ["operator.read", "operator.write"]
MAX_FRAME = 32 * 1024 * 1024


class OpenClawRPCError(Exception):
    """OpenClaw's gateway refused a request or went away; ``reason`` is machine-readable.

    ``unauthorized``: the token was refused; ``refused``: the gateway answered ``ok: false``
    (``code`` holds its error code); ``unreachable`` / ``closed`` / ``timeout``: no answer.
    """

    def __init__(self, detail: str, *, reason: str, code: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.code = code


class OpenClawRPC:
    """A connected operator session on an OpenClaw gateway."""

    def __init__(self, socket: ClientConnection, hello: dict[str, Any]) -> None:
        self._socket = socket
        self.hello = hello
        """The ``hello-ok`` payload: server version, methods, events, policy."""
        self._ids = itertools.count(1)
        self._waiting: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self.events: list[dict[str, Any]] = []
        """Event frames received (``agent``, ``chat``, ...), newest last, at most 1000 kept."""
        self.closed = anyio.Event()

    @property
    def methods(self) -> list[str]:
        return list((self.hello.get("features") or {}).get("methods") or [])

    async def call(self, method: str, params: dict[str, Any], *, timeout_s: float = 30) -> Any:
        """Send one request; return its ``payload`` or raise ``OpenClawRPCError``."""
        if self.closed.is_set():
            raise OpenClawRPCError("the OpenClaw gateway connection is closed", reason="closed")
        request_id = f"r{next(self._ids)}"
        done, answer = anyio.Event(), list[dict[str, Any]]()
        self._waiting[request_id] = (done, answer)
        try:
            frame = {"type": "req", "id": request_id, "method": method, "params": params}
            await self._socket.send(json.dumps(frame))
            with anyio.move_on_after(timeout_s) as waited:
                async with anyio.create_task_group() as tasks:

                    async def closed() -> None:
                        await self.closed.wait()
                        tasks.cancel_scope.cancel()

                    tasks.start_soon(closed)
                    await done.wait()
                    tasks.cancel_scope.cancel()
        except ConnectionClosed:
            raise OpenClawRPCError(f"the gateway closed during {method}", reason="closed") from None
        finally:
            self._waiting.pop(request_id, None)
        if waited.cancelled_caught:
            raise OpenClawRPCError(f"{method} got no answer in {timeout_s:g} s", reason="timeout")
        if not answer:
            raise OpenClawRPCError(f"the gateway closed during {method}", reason="closed")
        return _payload(answer[0], method)

    async def agent(
        self,
        message: str,
        *,
        session_key: str,
        agent_id: str = "main",
        idempotency_key: str | None = None,
    ) -> str:
        """Start an agent run on ``message`` in session ``session_key``; returns its ``runId``."""
        payload = await self.call(
            "agent",
            {
                "message": message,
                "agentId": agent_id,
                "sessionKey": session_key,
                "idempotencyKey": idempotency_key or uuid.uuid4().hex,
            },
        )
        run_id = payload.get("runId") if isinstance(payload, dict) else None
        if not isinstance(run_id, str):
            raise OpenClawRPCError(f"agent returned no runId: {payload!r}", reason="refused")
        return run_id

    async def agent_wait(self, run_id: str, *, timeout_s: float) -> dict[str, Any]:
        """Wait for the run to end; its terminal snapshot (``status``, the reply text, ...)."""
        payload = await self.call(
            "agent.wait",
            {"runId": run_id, "timeoutMs": int(timeout_s * 1000)},
            timeout_s=timeout_s + 10,
        )
        return payload if isinstance(payload, dict) else {"result": payload}

    async def _read(self) -> None:
        try:
            async for raw in self._socket:
                frame = json.loads(raw)
                if frame.get("type") == "res":
                    waiting = self._waiting.get(str(frame.get("id")))
                    if waiting is not None:
                        waiting[1].append(frame)
                        waiting[0].set()
                elif frame.get("type") == "event":
                    self.events.append(frame)
                    del self.events[:-1000]
        except (ConnectionClosed, ValueError):
            pass
        finally:
            self.closed.set()


@asynccontextmanager
async def open_rpc(
    token: str,
    *,
    url: str = "ws://127.0.0.1/",
    unix_path: str | None = None,
    timeout_s: float = 15,
) -> AsyncIterator[OpenClawRPC]:
    """Connect (TCP ``url``, or ``unix_path`` with ``url`` as the WebSocket URI) and hand over a
    connected session; leaving the block closes it."""
    try:
        opening = (
            unix_connect(unix_path, url, max_size=MAX_FRAME, open_timeout=timeout_s)
            if unix_path is not None
            else connect(url, max_size=MAX_FRAME, open_timeout=timeout_s)
        )
        socket = await opening
    except (OSError, InvalidHandshake, InvalidMessage, TimeoutError) as exc:
        raise OpenClawRPCError(
            f"cannot open OpenClaw's gateway RPC: {type(exc).__name__}: {exc}",
            reason="unreachable",
        ) from None
    async with socket:
        try:
            hello = await _handshake(socket, token, timeout_s)
        except (ConnectionClosed, TimeoutError) as exc:
            raise OpenClawRPCError(
                f"OpenClaw's gateway closed the connection during the handshake ({exc!r})",
                reason="unreachable",
            ) from None
        rpc = OpenClawRPC(socket, hello)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(rpc._read)
            try:
                yield rpc
            finally:
                tasks.cancel_scope.cancel()


async def _handshake(socket: ClientConnection, token: str, timeout_s: float) -> dict[str, Any]:
    with anyio.fail_after(timeout_s):
        while True:
            frame = json.loads(await socket.recv())
            if frame.get("type") == "event" and frame.get("event") == "connect.challenge":
                break
        connect_frame = {
            "type": "req",
            "id": "connect",
            "method": "connect",
            "params": {
                "minProtocol": PROTOCOL,
                "maxProtocol": PROTOCOL,
                "client": CLIENT,
                "role": "operator",
                "scopes": SCOPES,
                "auth": {"token": token},
            },
        }
        await socket.send(json.dumps(connect_frame))
        while True:
            frame = json.loads(await socket.recv())
            if frame.get("type") == "res" and frame.get("id") == "connect":
                break
    if not frame.get("ok"):
        error = frame.get("error") or {}
        code = str(error.get("code") or "")
        unauthorized = "auth" in code.lower() or "token" in str(error.get("message", "")).lower()
        raise OpenClawRPCError(
            f"OpenClaw's gateway refused the connection: {error.get('message') or error}",
            reason="unauthorized" if unauthorized else "refused",
            code=code or None,
        )
    hello = frame.get("payload")
    return hello if isinstance(hello, dict) else {}


def _payload(frame: dict[str, Any], method: str) -> Any:
    if frame.get("ok"):
        return frame.get("payload")
    error = frame.get("error") or {}
    raise OpenClawRPCError(
        f"OpenClaw refused {method}: {error.get('message') or error}",
        reason="refused",
        code=str(error.get("code")) if error.get("code") else None,
    )
