"""An agent that opens many gateway connections holding slow bodies: the gateway's memory stays
bounded by its limits, and other agents are still served.

The gateway runs in a process of its own, so its resident memory is that process's alone.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from controller.modelgateway import ModelGateway, ProviderConfig
from controller.modelgateway.admission import DEFAULT_GATEWAY_LIMITS, MIB, GatewayLimits

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent
BODY_BYTES = 4 * MIB  # the largest body one request may declare
ATTACKERS = 150


@dataclass
class ChildGateway:
    process: subprocess.Popen[str]
    base_url: str
    tokens: dict[str, str]

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1].split("/")[0])

    def memory_kib(self, field: str) -> int:
        """``VmRSS`` (resident now) or ``VmHWM`` (the most it was ever resident), in KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        [line] = [line for line in status.splitlines() if line.startswith(f"{field}:")]
        return int(line.split()[1])


@pytest.fixture
def child_gateway() -> Iterator[ChildGateway]:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "gateway_child.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        yield ChildGateway(process, ready["baseUrl"], ready["tokens"])
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def until(condition: Callable[[], bool], within: float = 5) -> None:
    """Wait until ``condition()`` holds, checking every few milliseconds."""
    with anyio.fail_after(within):
        while True:
            if condition():
                return
            await anyio.sleep(0.01)


def slow_body_head(token: str, framing: str) -> bytes:
    length = (
        f"content-length: {BODY_BYTES}\r\n"
        if framing == "content-length"
        else "transfer-encoding: chunked\r\n"
    )
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n"
        f"content-type: application/json\r\n{length}\r\n"
    ).encode()


def all_but_the_last_byte(framing: str) -> bytes:
    if framing == "content-length":
        return b" " * (BODY_BYTES - 1)
    chunk = 64 * 1024
    return (f"{chunk:x}\r\n".encode() + b" " * chunk + b"\r\n") * (BODY_BYTES // chunk - 1)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_many_slow_bodies_from_one_agent_stay_within_its_bound_and_others_are_served(
    child_gateway: ChildGateway, framing: str
) -> None:
    gateway = child_gateway
    before_kib = gateway.memory_kib("VmRSS")
    head = slow_body_head(gateway.tokens["mallory"], framing)
    body = all_but_the_last_byte(framing)
    answers: list[bytes] = []
    closed = 0  # connections the gateway refused and closed while their bodies arrived
    sent = 0

    async def slow_body() -> None:  # everything but the last byte, then wait, holding it
        nonlocal sent, closed
        async with await anyio.connect_tcp("127.0.0.1", gateway.port) as stream:
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                await stream.send(head + body)
            sent += 1
            try:
                answers.append(await stream.receive())  # held bodies get no answer
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass  # the answer was lost to the reset of a refused connection
            closed += 1
            await anyio.sleep_forever()

    async with anyio.create_task_group() as attack:
        for _ in range(ATTACKERS):
            attack.start_soon(slow_body)
        await until(lambda: sent == ATTACKERS, within=60)
        await anyio.sleep(1)  # what the gateway reads of the held bodies, it has read
        peak_kib = gateway.memory_kib("VmHWM")
        held = ATTACKERS - closed
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=10) as client:
            alice = await client.post(
                "/chat/completions",
                headers={"authorization": f"Bearer {gateway.tokens['alice']}"},
                json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
            )
        attack.cancel_scope.cancel()
    grown_mib = (peak_kib - before_kib) / 1024
    bound_mib = DEFAULT_GATEWAY_LIMITS.max_body_bytes_per_agent / MIB
    # before the bounds: 150 bodies of 4 MiB, about 600 MiB; now one agent's 8 MiB, with room for
    # the buffers' growth and the answers (the slack is the allocator's, not the attack's)
    assert grown_mib <= bound_mib + 16, f"grew {grown_mib:.0f} MiB"
    assert alice.status_code == 200
    assert held <= 2  # two 4 MiB bodies fill one agent's allowance; the rest are closed
    refusals = [a for a in answers if a.startswith(b"HTTP/1.1 ")]
    assert all(a.startswith(b"HTTP/1.1 429") for a in refusals)
    assert all(b"body_bytes_in_flight" in a or b"too_many_connections" in a for a in refusals)


async def answer_or_hold(port: int, data: bytes, within: float) -> bytes | None:
    """Send ``data``; the gateway's first answer, or ``None`` if it holds the connection."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        with contextlib.suppress(anyio.BrokenResourceError, OSError):
            await stream.send(data)
        with anyio.move_on_after(within):
            try:
                return await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return b"closed"
        return None


async def test_connections_past_the_limit_are_refused_at_accept_and_agents_together_are_bounded(
    fake_provider: Any, ledger: Any
) -> None:
    limits = GatewayLimits(
        max_connections=8, max_body_bytes_per_agent=2 * MIB, max_body_bytes=3 * MIB
    )
    provider = ProviderConfig(name="fake", base_url=fake_provider.base_url, model="fake-model")
    async with ModelGateway([provider], ledger=ledger, limits=limits) as gateway:
        port = int(gateway.base_url.rsplit(":", 1)[1].split("/")[0])
        tokens = [gateway.issue_token(name) for name in ("ann", "ben", "cy")]
        idle: list[bytes | None] = []
        async with anyio.create_task_group() as crowd:  # 20 connections that never send a head

            async def idle_peer() -> None:
                idle.append(await answer_or_hold(port, b"", within=1))

            for _ in range(20):
                crowd.start_soon(idle_peer)
        assert idle.count(None) <= 8  # held while they wait for a head
        assert sum(1 for a in idle if a and a.startswith(b"HTTP/1.1 503")) >= 12
        await until(lambda: gateway.bounds.connections == 0)  # once it sees each one closed
        # three colluding agents declaring 1 MiB bodies each, twice: 3 MiB in all at most
        heads = [
            (
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                f"authorization: Bearer {token}\r\ncontent-length: {MIB}\r\n\r\n"
            ).encode()
            for token in tokens
            for _ in range(2)
        ]
        answers: list[bytes | None] = []
        most_buffered = 0
        async with anyio.create_task_group() as collusion:

            async def slow(head: bytes) -> None:
                answers.append(await answer_or_hold(port, head + b" " * (MIB - 1), within=1))

            for head in heads:
                collusion.start_soon(slow, head)
            with anyio.move_on_after(0.8):
                while True:
                    most_buffered = max(most_buffered, gateway.bounds.buffered)
                    await anyio.sleep(0.01)
    assert most_buffered <= limits.max_body_bytes
    assert answers.count(None) == 3
    assert all(a is None or a.startswith(b"HTTP/1.1 503") or a == b"closed" for a in answers)
