"""The scripted agent's owner API answers its owner only, over the bridge port."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from controller.agents import Observation, RuntimeDescriptorError
from controller.agents.bridge import BridgeOwner, attach_bridge
from controller.agents.runtime import SandboxAccess
from society_sandbox import owner_api
from society_sandbox.owner_api import OwnerApiServer, OwnerHandlers

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


async def test_the_owner_api_refuses_a_wrong_token_and_serves_the_right_one() -> None:
    instructions: list[str] = []
    stopped: list[bool] = []

    async def instruct(text: str, peers: tuple[str, ...]) -> None:
        instructions.append(text)

    handlers = OwnerHandlers(
        state=lambda: {"sent": 3}, instruct=instruct, stop=lambda reason: stopped.append(True)
    )
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server = OwnerApiServer(listener, "right-token", handlers)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve)
        refused = await ask(port, {"op": "hello", "token": "wrong"}, {"id": 1, "op": "state"})
        assert refused == [{"ok": False, "error": "unauthorized", "reason": "unauthorized"}]
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
            {"id": 3, "ok": False, "error": "unknown op 'fly'", "reason": "unknown-op"},
            {"id": 4, "ok": True, "result": {"stopping": True}},
        ]
        tasks.cancel_scope.cancel()
    assert instructions == ["greet"] and stopped == [True]


async def exchange(port: int, *lines: bytes) -> list[dict[str, Any]]:
    """Send raw lines; every answer until the agent closes the connection (or goes quiet)."""
    answers: list[dict[str, Any]] = []
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        reader = BufferedByteReceiveStream(stream)
        for line in lines:
            try:
                await stream.send(line)
                with anyio.fail_after(5):
                    answers.append(json.loads(await reader.receive_until(b"\n", 65536)))
            except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
                break
    return answers


HELLO = json.dumps({"op": "hello", "token": "right-token"}).encode() + b"\n"
HOSTILE_HELLOS = [
    b"[]\n",
    b"[" * 5000 + b"\n",
    b"{" * 5000 + b"\n",
    b'{"op":"hello","token":["right-token"]}\n',
    b'{"op":"hello","token":"right-token","pad":"' + b"x" * 4096 + b'"}\n',
    b"\xff\xfe\n",
    b"x" * 200_000,
]
HOSTILE_REQUESTS = [
    b"[]\n",
    b"[" * 5000 + b"\n",
    b'{"id":' + b"[" * 3000 + b"]" * 3000 + b',"op":"state"}\n',
    b'{"id":[[]],"op":"state"}\n',
    b'{"id":1,"op":{"a":1}}\n',
    b'{"id":2,"op":"instruct","text":["x"],"peers":{"a":1}}\n',
    b'{"id":4,"op":"instruct","text":"lone \\ud800 surrogate"}\n',
    STOP_WITH_ODD_REASON := b'{"id":3,"op":"stop","reason":{"why":[1]}}\n',
    b"\xff\n",
]


def serving(handlers: OwnerHandlers) -> Any:
    """An owner API on a free port whose ``serve`` must outlive every hostile connection."""

    class Serving:
        async def __aenter__(self) -> int:
            self.listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
            port: int = self.listener.extra(anyio.abc.SocketAttribute.local_port)
            self.tasks = anyio.create_task_group()
            await self.tasks.__aenter__()
            self.tasks.start_soon(OwnerApiServer(self.listener, "right-token", handlers).serve)
            return port

        async def __aexit__(self, *exc: object) -> None:
            self.tasks.cancel_scope.cancel()
            await self.tasks.__aexit__(None, None, None)

    return Serving()


async def nothing(text: str, peers: tuple[str, ...]) -> None:
    return None


PLAIN = OwnerHandlers(state=lambda: {"sent": 0}, instruct=nothing, stop=lambda reason: None)


@pytest.mark.parametrize("hello", HOSTILE_HELLOS)
async def test_a_hostile_first_line_is_refused_without_the_token_and_the_agent_keeps_serving(
    hello: bytes,
) -> None:
    async with serving(PLAIN) as port:
        refused = await exchange(port, hello, b'{"id":1,"op":"state"}\n')
        assert refused in ([], [{"ok": False, "error": "unauthorized", "reason": "unauthorized"}])
        assert await exchange(port, HELLO, b'{"id":1,"op":"state"}\n') == [
            {"ok": True},
            {"id": 1, "ok": True, "result": {"sent": 0}},
        ]


async def test_hostile_requests_get_typed_refusals_and_the_agent_keeps_serving() -> None:
    stopped: list[str] = []
    handlers = OwnerHandlers(state=lambda: {"sent": 0}, instruct=nothing, stop=stopped.append)
    async with serving(handlers) as port:
        answers = await exchange(port, HELLO, *HOSTILE_REQUESTS, b'{"id":9,"op":"state"}\n')
        assert len(answers) == len(HOSTILE_REQUESTS) + 2 and answers[0] == {"ok": True}
        stop = answers.pop(1 + HOSTILE_REQUESTS.index(STOP_WITH_ODD_REASON))
        assert stop == {"id": 3, "ok": True, "result": {"stopping": True}}
        refusals = answers[1:-1]
        assert all(a["ok"] is False and a["reason"] for a in refusals), refusals
        assert {a["reason"] for a in refusals} == {"malformed-request", "unknown-op", "bad-field"}
        assert answers[-1] == {"id": 9, "ok": True, "result": {"sent": 0}}
        too_long = await exchange(port, HELLO, b"x" * 100_000 + b"\n")
        assert all(a["reason"] == "malformed-request" for a in too_long[1:])  # if not reset
        assert len(await exchange(port, HELLO, b'{"id":1,"op":"state"}\n')) == 2
    assert stopped == ["owner"]


async def hostile_program(answers: list[bytes]) -> Any:
    """A program that takes the controller's hello and requests and answers each with the
    next of ``answers`` (an agent gone bad, seen from the controller's side)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def answer(stream: Any) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            for line in answers:
                await reader.receive_until(b"\n", 65536)
                await stream.send(line)
            await anyio.sleep(30)

    return listener, answer


@pytest.mark.parametrize(
    "answers",
    [
        [b"[]\n"],
        [b"[" * 5000 + b"\n"],
        [b'{"ok":true}\n', b"[]\n"],
        [b'{"ok":true}\n', b'{"id":[1],"ok":true}\n'],
        [b'{"ok":true}\n', b"[" * 5000 + b"\n"],
        [b'{"ok":true}\n', b'{"event":"terminating","id":{"a":1}}\n' + b"x" * 2_000_000],
    ],
)
async def test_a_hostile_program_gets_a_typed_error_on_the_controller_side(
    answers: list[bytes],
) -> None:
    listener, answer = await hostile_program(answers)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    access = SandboxAccess("mallory", "127.0.0.1", port, "bridge-token", exit=Observation())
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, answer)
        with pytest.raises(RuntimeDescriptorError) as refused:
            async with attach_bridge(access, BridgeOwner, runtime="test", timeout_s=5):
                pass
        tasks.cancel_scope.cancel()
    assert refused.value.reason in ("bridge-malformed", "bridge-failed")


async def test_a_connection_the_agent_closes_before_the_hello_is_tried_again() -> None:
    """The agent's bridge closes a connection whose hello has not come within its hello timeout
    (a controller slowed by a large roster's start can be that late): the controller sees the
    connection end before any answer and connects again, and the agent is attached."""
    handlers = OwnerHandlers(state=lambda: {"sent": 0}, instruct=None, stop=None)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server = OwnerApiServer(listener, "bridge-token", handlers)

    access = SandboxAccess("ann", "127.0.0.1", port, "bridge-token", exit=Observation())
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve)
        real_connect = anyio.connect_tcp
        first = True

        async def connect_late_the_first_time(host: str, port: int) -> Any:
            """The controller's first connection is the one that is late with its hello."""
            nonlocal first
            stream = await real_connect(host, port)
            if first:
                first = False
                with pytest.raises(anyio.EndOfStream):
                    await stream.receive()  # the agent closed it: no hello came in time
            return stream

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(owner_api, "HELLO_TIMEOUT_S", 0.2)
            patch.setattr(anyio, "connect_tcp", connect_late_the_first_time)
            async with attach_bridge(access, BridgeOwner, runtime="test", timeout_s=10) as held:
                assert await held.owner.state() == {"sent": 0}
        assert first is False
        tasks.cancel_scope.cancel()
