"""Light load generators for the router benchmarks: raw WebSocket clients in separate processes.

A generator speaks protocol v1 with pre-formatted frames on plain asyncio transports: no
validation, no tasks per message, a zero masking key (the server unmasks it like any other;
RFC 6455's unpredictable keys guard browsers against proxy poisoning, moot on loopback). It
costs a few tens of microseconds per message, so a few generator processes saturate a server
that costs hundreds: the benchmark then measures the server, not the clients.

The server side (``run_generators``) starts one process per ``Plan``, waits until each has all
its sessions authenticated, starts them together and collects one JSON result from each. A
process is this file run with ``--generator`` (raw frames) or ``--library`` (the agent client
library, ``society_sandbox.network.client``, for its own CPU figure).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

CONNECTING = 32
"""Sessions of one generator that open their connection at once (the listener's backlog is
100)."""


@dataclass
class Plan:
    """What one generator process does: its share of the sessions, for one phase."""

    phase: str  # "throughput" or "latency"
    url: str
    tokens: list[str]
    conversations: list[str]
    messages: int  # per session, throughput phase
    window: int  # sends in flight per session, throughput phase
    sends: int  # per session, latency phase
    interval: float  # seconds between one session's sends, latency phase
    drain: float = 0.0
    """Latency phase: when > 0, deliveries may be dropped on the way; the phase ends once every
    send is acknowledged and no delivery came for this many seconds."""


def raise_open_files_limit() -> None:
    """Soft open-files limit up to the hard one (a process with many sessions needs it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def run_generators(
    plans: list[Plan], *, library: bool = False, on_ready: Callable[[], None] | None = None
) -> list[dict[str, Any]]:
    """Start one process per plan, let all connect, start them together, collect results.

    ``on_ready`` runs once every session of every plan is connected and authenticated.
    """
    mode = "--library" if library else "--generator"
    results: list[dict[str, Any]] = []
    async with anyio.create_task_group() as tasks:
        processes = []
        for plan in plans:
            process = await anyio.open_process(
                [sys.executable, __file__, mode], stderr=None, env={**os.environ}
            )
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.send(json.dumps(asdict(plan)).encode() + b"\n")
            processes.append((process, BufferedByteReceiveStream(process.stdout)))
        try:
            for _, lines in processes:
                assert await lines.receive_until(b"\n", 64) == b"ready"
            if on_ready is not None:
                on_ready()
            for process, _ in processes:
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
            for _, lines in processes:
                results.append(json.loads(await lines.receive_until(b"\n", 1 << 26)))
            for process, _ in processes:
                await process.wait()
        finally:
            for process, _ in processes:
                if process.returncode is None:
                    process.kill()
                await process.aclose()
        tasks.cancel_scope.cancel()
    return results


# ---- the raw generator ---------------------------------------------------------------------


def _frame(text: str) -> bytes:
    """One masked client text frame; the masking key is zero, so the payload goes as it is."""
    payload = text.encode()
    n = len(payload)
    if n < 126:
        header = bytes((0x81, 0x80 | n))
    elif n < 65536:
        header = bytes((0x81, 0xFE)) + n.to_bytes(2, "big")
    else:
        header = bytes((0x81, 0xFF)) + n.to_bytes(8, "big")
    return header + b"\0\0\0\0" + payload


class _Session(asyncio.Protocol):
    """One raw WebSocket session: handshake, authenticate, then frames handled in callbacks."""

    def __init__(self, generator: _Generator, index: int) -> None:
        self.generator = generator
        self.index = index
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded = False
        self.authenticated = asyncio.get_running_loop().create_future()
        self.sent = 0
        self.acked = 0
        self.received = 0
        self.conversation = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if not buffer.startswith(b"HTTP/1.1 101"):
                raise RuntimeError(f"upgrade refused: {bytes(buffer[:200])!r}")
            del buffer[: end + 4]
            self.upgraded = True
        position = 0
        size = len(buffer)
        while size - position >= 2:
            opcode, length = buffer[position] & 0x0F, buffer[position + 1] & 0x7F
            start = position + 2
            if length == 126:
                if size - start < 2:
                    break
                length = int.from_bytes(buffer[start : start + 2], "big")
                start += 2
            elif length == 127:
                if size - start < 8:
                    break
                length = int.from_bytes(buffer[start : start + 8], "big")
                start += 8
            if size - start < length:
                break
            position = start + length
            if opcode == 1:
                self.generator.on_frame(self, json.loads(buffer[start:position]))
            elif opcode == 8:
                self.generator.fail(f"session {self.index} closed by the server")
        del buffer[:position]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.generator.finished.done():
            self.generator.fail(f"session {self.index} lost its connection: {exc}")

    def write(self, text: str) -> None:
        assert self.transport is not None
        self.transport.write(_frame(text))


class _Generator:
    """Every session of one plan, and what they count."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.sessions: list[_Session] = []
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.remaining = 0
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.delivered: list[tuple[int, str, float]] = []  # (session, message id, latency)
        self.last_delivery = 0.0
        self.prefix = os.urandom(6).hex()  # client message ids stay unique across runs
        self.sends = plan.messages if plan.phase == "throughput" else plan.sends
        self.on_delivery: Callable[[_Session, dict[str, Any]], None] = (
            self._timed if plan.phase == "latency" else self._counted
        )

    def fail(self, why: str) -> None:
        if not self.finished.done():
            self.finished.set_exception(RuntimeError(why))

    async def connect(self) -> None:
        host, _, port = self.plan.url.removeprefix("ws://").partition(":")
        loop = asyncio.get_running_loop()

        opening = asyncio.Semaphore(CONNECTING)

        async def one(index: int) -> None:
            async with opening:
                await connect_one(index)

        async def connect_one(index: int) -> None:
            _, session = await loop.create_connection(
                lambda: _Session(self, index), host, int(port)
            )
            key = base64.b64encode(os.urandom(16)).decode()
            assert session.transport is not None
            session.transport.write(
                f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\n\r\n".encode()
            )
            token = json.dumps(self.plan.tokens[index])
            session.write(f'{{"type":"authenticate","versions":[1],"token":{token}}}')
            session.conversation = json.dumps(self.plan.conversations[index])
            await session.authenticated
            self.sessions.append(session)

        self.sessions = []
        await asyncio.gather(*(one(n) for n in range(len(self.plan.tokens))))
        self.sessions.sort(key=lambda s: s.index)
        # what ends the phase: each session's deliveries (unless they may be dropped) and acks
        sent = self.sends * len(self.sessions)
        self.remaining = (0 if self.plan.drain else sent) + (
            sent if self.plan.phase == "throughput" or self.plan.drain else 0
        )

    def send(self, session: _Session, text: str) -> None:
        session.sent += 1
        n = session.sent
        session.write(
            f'{{"type":"send","requestId":"r-{n}","conversationId":{session.conversation},'
            f'"clientMessageId":"{self.prefix}-{session.index}-{n}","parts":[{json.dumps(text)}]}}'
        )

    def on_frame(self, session: _Session, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "delivery":
            session.write(f'{{"type":"delivery-ack","messageId":"{frame["messageId"]}"}}')
            session.received += 1
            self.on_delivery(session, frame)
            if not self.plan.drain:
                self._count()
        elif kind == "ack":
            session.acked += 1
            if self.plan.phase == "throughput":
                if session.sent < self.sends:
                    self.send(session, f"message {session.sent} from {session.index}")
                self._count()
            elif self.plan.drain:
                self._count()
        elif kind == "authenticated":
            session.authenticated.set_result(None)
        elif kind == "error":
            self.errors.append(f"{frame.get('code')}: {frame.get('message')}")
            if not session.authenticated.done():
                session.authenticated.set_exception(RuntimeError(self.errors[-1]))
            else:
                self.fail(f"the server refused: {self.errors[-1]}")

    def _count(self) -> None:
        self.remaining -= 1
        if self.remaining == 0 and not self.finished.done():
            if self.plan.drain:
                self._drained()
            else:
                self.finished.set_result(None)

    def _drained(self) -> None:
        quiet = time.monotonic() - self.last_delivery
        if quiet >= self.plan.drain:
            if not self.finished.done():
                self.finished.set_result(None)
        else:
            asyncio.get_running_loop().call_later(self.plan.drain - quiet, self._drained)

    def _counted(self, session: _Session, frame: dict[str, Any]) -> None:
        pass

    def _timed(self, session: _Session, frame: dict[str, Any]) -> None:
        now = time.monotonic()
        latency = now - float(frame["parts"][0])
        self.latencies.append(latency)
        if self.plan.drain:
            self.last_delivery = now
            self.delivered.append((session.index, frame["messageId"], latency))

    def start(self) -> None:
        plan = self.plan
        if plan.phase == "throughput":
            for session in self.sessions:
                for _ in range(min(plan.window, self.sends)):
                    self.send(session, f"message {session.sent} from {session.index}")
            return
        loop = asyncio.get_running_loop()  # its clock is time.monotonic, as the receivers'
        start = loop.time() + 0.1
        count = len(self.sessions)

        def due_send(session: _Session, due: float) -> None:
            self.send(session, repr(due))
            if session.sent < self.sends:
                loop.call_at(due + plan.interval, due_send, session, due + plan.interval)

        for session in self.sessions:
            first = start + plan.interval * session.index / count
            loop.call_at(first, due_send, session, first)


async def _generate(plan: Plan) -> dict[str, Any]:
    generator = _Generator(plan)
    await asyncio.wait_for(generator.connect(), 300)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    assert (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "go"
    cpu = time.process_time()
    started = time.time()
    generator.start()
    await asyncio.wait_for(generator.finished, 600)
    finished = time.time()
    return {
        "started": started,
        "finished": finished,
        "messages": generator.sends * len(generator.sessions),
        "latencies": generator.latencies,
        "cpu": time.process_time() - cpu,
        "errors": generator.errors,
        "delivered": generator.delivered,
    }


GENERATOR_CPUS = "ROUTER_BENCH_GENERATOR_CPUS"
"""CPUs the load generators run on (``router_bench.py --pin``), comma-separated; unset: any."""


if __name__ == "__main__":
    raise_open_files_limit()
    if cpus := os.environ.get(GENERATOR_CPUS):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    plan = Plan(**json.loads(sys.stdin.readline()))
    if sys.argv[1:] == ["--library"]:
        from router_library_load import library_load

        result = anyio.run(library_load, plan)
    else:
        result = asyncio.run(_generate(plan))
    print(json.dumps(result), flush=True)
