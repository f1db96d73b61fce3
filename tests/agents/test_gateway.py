"""The scripted gateway answers its owner only, over the bridge port."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from agent_images.owner_api import OwnerGateway, OwnerHandlers

pytestmark = pytest.mark.anyio


async def ask(port: int, *frames: dict[str, Any]) -> list[dict[str, Any]]:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        reader = BufferedByteReceiveStream(stream)
        answers = []
        for frame in frames:
            await stream.send(json.dumps(frame).encode() + b"\n")
            try:
                answers.append(json.loads(await reader.receive_until(b"\n", 65536)))
            except anyio.IncompleteRead:
                break
        return answers


async def test_the_gateway_refuses_a_wrong_token_and_serves_the_right_one() -> None:
    instructions: list[str] = []
    stopped: list[bool] = []

    async def instruct(text: str, peers: tuple[str, ...]) -> None:
        instructions.append(text)

    handlers = OwnerHandlers(
        state=lambda: {"sent": 3}, instruct=instruct, stop=lambda reason: stopped.append(True)
    )
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server = OwnerGateway(listener, "right-token", handlers)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve)
        refused = await ask(port, {"op": "hello", "token": "wrong"}, {"id": 1, "op": "state"})
        assert refused == [{"ok": False, "error": "unauthorized"}]
        served = await ask(
            port,
            {"op": "hello", "token": "right-token"},
            {"id": 1, "op": "state"},
            {"id": 2, "op": "instruct", "text": "greet"},
            {"id": 3, "op": "fly"},
            {"id": 4, "op": "stop"},
        )
        assert served == [
            {"ok": True},
            {"id": 1, "ok": True, "result": {"sent": 3}},
            {"id": 2, "ok": True, "result": {"accepted": True}},
            {"id": 3, "ok": False, "error": "unknown op 'fly'"},
            {"id": 4, "ok": True, "result": {"stopping": True}},
        ]
        tasks.cancel_scope.cancel()
    assert instructions == ["greet"] and stopped == [True]
