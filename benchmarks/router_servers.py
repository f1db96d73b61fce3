"""The servers the router benchmarks compare, and what they measure about the server process.

  (a) ``durable``  the router with the durable ledger (group commit + fsync);
  (b) ``nowhere``  the same router with a ledger whose writes and fsyncs are no-ops (a
                   ``DurableFiles`` of its own, so its sync loop runs on a thread, not a process);
  (c) ``bare``     a bare ``websockets`` relay exchanging the same four frames per message
                   (send, ack, delivery, delivery ack): no auth, no validation, no ledger.

``ledger_alone`` is the durable ledger by itself at the offered rate: what a commit costs on this
disk at this moment, with no router in front of it (a floor for the durable router's latency).

Each yields a ``Served``: the URL, one token and one conversation per session (sessions 2k and
2k+1 share a conversation), and for the router variants the router and its ledger directory.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from controller.events.network import RouterMessageCommitted, network_events
from controller.network.limits import MessageLimits
from controller.network.router import Router
from controller.network.tuning import tune_for_router
from ledger import DurableFiles, LedgerWriter, Provenance, open_ledger_writer
from society_sandbox.network.protocol import MAX_FRAME_BYTES

VARIANTS = ("durable", "nowhere", "bare")
SATURATING = MessageLimits(
    messages_per_second=1e12, message_burst=10**12, bytes_per_second=2**62, byte_burst=2**62
)
"""Send limits a saturating load never reaches: the benchmark measures the router, not them."""


class NowhereFiles(DurableFiles):
    """A ledger that encodes, chains and signs every record, then writes it to nowhere."""

    def write(self, fd: int, data: bytes) -> None:
        pass

    def fsync(self, fd: int) -> None:
        pass


async def ledger_alone(offered: float, seconds: float) -> list[float]:
    """Seconds from each scheduled append to its commit callback, one append every 1/offered s."""
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="router-bench-") as directory:
        async with open_ledger_writer(
            Path(directory) / "ledger",
            catalog=network_events,
            definition_id="bench.router/v1",
            run_id="sr-" + "0" * 32,
            provenance=Provenance.current("bench"),
        ) as ledger:
            start = anyio.current_time() + 0.1
            for n in range(round(offered * seconds)):
                due = start + n / offered
                await anyio.sleep_until(due)
                ledger.append_soon(
                    RouterMessageCommitted(
                        conversation_id="c-1",
                        message_id=f"m-{n + 1}",
                        sender_id="agent:agent-0",
                        router_sequence=n + 1,
                        parts=[repr(due)],
                    ),
                    producer="router",
                    then=lambda _, due=due: latencies.append(anyio.current_time() - due),
                )
            await ledger.flushed()
    return latencies


@dataclass
class Served:
    url: str
    tokens: list[str]
    conversations: list[str]
    router: Router | None = None
    ledger: LedgerWriter | None = None


def serve_variant(variant: str, sessions: int) -> AsyncIterator[Served]:
    if variant == "bare":
        return bare_relay(sessions)
    return router_server(sessions, nowhere=variant == "nowhere")


@asynccontextmanager
async def router_server(sessions: int, *, nowhere: bool = False) -> AsyncIterator[Served]:
    tune_for_router()  # as the controller's entry points do
    with tempfile.TemporaryDirectory(prefix="router-bench-") as directory:
        async with (
            open_ledger_writer(
                Path(directory) / "ledger",
                catalog=network_events,
                definition_id="bench.router/v1",
                run_id="sr-" + "0" * 32,
                provenance=Provenance.current("bench"),
                files=NowhereFiles() if nowhere else DurableFiles(),
            ) as ledger,
            Router.serve(
                ledger, heartbeat_interval=30, heartbeat_timeout=120, message_limits=SATURATING
            ) as router,
        ):
            credentials = [router.register(f"agent-{n}") for n in range(sessions)]
            conversations = []
            for n in range(0, sessions, 2):
                ref = await router.open_conversation(
                    credentials[n].participant, [credentials[n + 1].participant]
                )
                conversations += [ref.conversation_id, ref.conversation_id]
            await router.dispatch()
            yield Served(router.url, [c.token for c in credentials], conversations, router, ledger)


@asynccontextmanager
async def bare_relay(sessions: int) -> AsyncIterator[Served]:
    """Relays the same frames with json.loads and string building; trusts everything."""
    connections: dict[str, ServerConnection] = {}
    sequence = 0

    def participant(name: str) -> dict[str, str]:
        return {"id": f"agent:{name}", "name": name}

    async def handler(websocket: ServerConnection) -> None:
        name = json.loads(await websocket.recv())["token"]
        index = int(name.split("-")[1])
        peer = f"agent-{index ^ 1}"
        connections[name] = websocket
        members = [participant(f"agent-{index & ~1}"), participant(f"agent-{index | 1}")]
        await websocket.send(
            json.dumps(
                {
                    "type": "authenticated",
                    "version": 1,
                    "participant": participant(name),
                    "heartbeatIntervalSeconds": 30.0,
                    "heartbeatTimeoutSeconds": 120.0,
                    "maxFrameBytes": MAX_FRAME_BYTES,
                }
            )
        )
        try:
            await relay(websocket, name, peer, members)
        except ConnectionClosed:
            pass

    async def relay(
        websocket: ServerConnection, name: str, peer: str, members: list[dict[str, str]]
    ) -> None:
        nonlocal sequence
        async for raw in websocket:
            frame = json.loads(raw)
            if frame["type"] != "send":
                continue  # delivery acks and heartbeats: nothing to do
            sequence += 1
            message_id = f"m-{sequence}"
            await websocket.send(
                json.dumps(
                    {
                        "type": "ack",
                        "requestId": frame["requestId"],
                        "clientMessageId": frame["clientMessageId"],
                        "messageId": message_id,
                        "routerSequence": sequence,
                    }
                )
            )
            receiver = connections.get(peer)
            if receiver is not None:
                await receiver.send(
                    json.dumps(
                        {
                            "type": "delivery",
                            "messageId": message_id,
                            "conversationId": frame["conversationId"],
                            "sender": participant(name),
                            "participants": members,
                            "parts": frame["parts"],
                            "routerSequence": sequence,
                        }
                    )
                )

    async with serve(
        handler, "127.0.0.1", 0, compression=None, ping_interval=None, max_size=MAX_FRAME_BYTES
    ) as server:
        port = server.sockets[0].getsockname()[1]
        tokens = [f"agent-{n}" for n in range(sessions)]
        conversations = [f"c-{n // 2 + 1}" for n in range(sessions)]
        yield Served(f"ws://127.0.0.1:{port}", tokens, conversations)


# ---- what the server process spends -------------------------------------------------------


def cpu_seconds(served: Served | None = None) -> float:
    """This process's CPU time, every thread, and its ledger's sync process's if it has one."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    spent = usage.ru_utime + usage.ru_stime
    pid = served.ledger.sync_process_pid if served is not None and served.ledger else None
    if pid is not None:
        with open(f"/proc/{pid}/stat") as stat:  # utime and stime, after the command's ")"
            fields = stat.read().rsplit(")", 1)[1].split()
        spent += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return spent


def open_sockets() -> int:
    """This process's open socket descriptors (not the pipes to the load generators)."""
    sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return sockets


class GCPauses:
    """Times the garbage collector's pauses (each one stops the event loop) while in use."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._started = 0.0

    def __enter__(self) -> GCPauses:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:  # not a collection that began before the measurement did
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def summary(self) -> str:
        """Per generation: collections and the longest pause, e.g. ``41/1.0 4/2.1 0/-``."""
        return " ".join(
            f"{len(ms)}/{max(ms):.1f}" if ms else "0/-"
            for ms in ([s * 1000 for g, s in self.pauses if g == gen] for gen in range(3))
        )
