"""Fuzzing both ends of the bridge with hostile lines: typed refusals, and no end to the task."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from anyio.from_thread import BlockingPortal, start_blocking_portal
from anyio.streams.buffered import BufferedByteReceiveStream
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controller.agents import Observation, RuntimeDescriptorError
from controller.agents.bridge import BridgeOwner, attach_bridge
from controller.agents.runtime import SandboxAccess
from society_sandbox.owner_api import MalformedLine, OwnerApiServer, OwnerHandlers, decode_line

TOKEN = "right-token"
HELLO = json.dumps({"op": "hello", "token": TOKEN}).encode() + b"\n"
REASONS = {"unauthorized", "malformed-request", "unknown-op", "bad-field"}
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
requests = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "op": st.sampled_from(["state", "instruct", "stop", "watch", "hello"]) | json_values,
        "text": json_values,
        "peers": json_values,
        "reason": json_values,
        "token": st.just(TOKEN) | json_values,
    },
)
lines = st.one_of(
    requests.map(lambda r: json.dumps(r).encode() + b"\n"),
    json_values.map(lambda v: json.dumps(v).encode() + b"\n"),
    st.binary(max_size=100).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.integers(1, 20_000).map(lambda d: b"[" * d + b"\n"),
    st.integers(1, 20_000).map(lambda d: b'{"id":' * d + b"\n"),
    st.integers(1, 200_000).map(lambda n: b"x" * n + b"\n"),
)


@dataclass
class LiveAgent:
    portal: BlockingPortal
    port: int


@pytest.fixture(scope="module")
def live_agent() -> Iterator[LiveAgent]:
    """One owner API for every example: its ``serve`` must survive whatever arrives."""

    async def nothing(text: str, peers: tuple[str, ...]) -> None:
        return None

    handlers = OwnerHandlers(state=lambda: {"alive": True}, instruct=nothing, stop=lambda r: None)
    with start_blocking_portal("asyncio") as portal:
        listener = portal.call(functools.partial(anyio.create_tcp_listener, local_host="127.0.0.1"))
        served = portal.start_task_soon(OwnerApiServer(listener, TOKEN, handlers).serve)
        yield LiveAgent(portal, listener.extra(SocketAttribute.local_port))
        assert not served.done(), "the owner API stopped serving"
        served.cancel()


async def _exchange(port: int, sent: list[bytes]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        reader = BufferedByteReceiveStream(stream)
        for line in sent:
            try:
                await stream.send(line)
                with anyio.fail_after(5):
                    answers.append(json.loads(await reader.receive_until(b"\n", 1 << 20)))
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                break
    return answers


@FUZZ
@given(hello=lines, more=st.lists(lines, max_size=4), authenticate=st.booleans())
def test_hostile_lines_to_an_agent_get_typed_refusals_and_it_keeps_serving(
    live_agent: LiveAgent, hello: bytes, more: list[bytes], authenticate: bool
) -> None:
    first = HELLO if authenticate else hello
    answers = live_agent.portal.call(_exchange, live_agent.port, [first, *more])
    for answer in answers:
        if answer.get("ok") is False:
            assert answer["reason"] in REASONS, answer
            event(answer["reason"])
    probe = [
        json.dumps({"op": "hello", "token": TOKEN}).encode() + b"\n",
        b'{"id":1,"op":"state"}\n',
    ]
    assert live_agent.portal.call(_exchange, live_agent.port, probe)[1]["result"] == {"alive": True}


async def _attach_to(program_lines: list[bytes]) -> str:
    """Attach the controller's bridge to a program that answers with ``program_lines``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def program(stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:  # answers the hello with everything, then hangs up
            await reader.receive_until(b"\n", 65536)
            await stream.send(b"".join(program_lines))

    port = listener.extra(SocketAttribute.local_port)
    access = SandboxAccess("mallory", "127.0.0.1", port, TOKEN, exit=Observation())
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, program)
        try:
            async with attach_bridge(access, BridgeOwner, runtime="fuzz", timeout_s=5):
                outcome = "attached"
        except RuntimeDescriptorError as refused:
            outcome = refused.reason
        tasks.cancel_scope.cancel()
    return outcome


@FUZZ
@given(welcomed=st.booleans(), answers=st.lists(lines, min_size=1, max_size=3))
def test_a_hostile_program_gets_a_typed_refusal_from_the_controllers_bridge(
    live_agent: LiveAgent, welcomed: bool, answers: list[bytes]
) -> None:
    welcome = [b'{"ok":true}\n'] if welcomed else []  # the hostile part may come after hello
    outcome = live_agent.portal.call(_attach_to, [*welcome, *answers])
    event(outcome)
    assert outcome in {
        "attached",
        "bridge-malformed",
        "bridge-failed",
        "bridge-refused",
        "program-cannot-start",  # a refusal of `state` in the shape a program gives
    }


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
def test_the_nesting_bound_is_exact_and_checked_before_parsing(value: dict[str, Any]) -> None:
    line = json.dumps(value).encode()
    depth = _depth(value)
    assert decode_line(line, max_depth=depth) == value
    with pytest.raises(MalformedLine):
        decode_line(line, max_depth=depth - 1)
