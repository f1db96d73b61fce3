"""Router benchmark: the production router against itself without durability and a bare relay.

Three servers, each driven by the same agent client library from a separate process:

  (a) ``durable``  the router with the durable ledger (group commit + fsync);
  (b) ``nowhere``  the same router with a ledger whose writes and fsyncs are no-ops;
  (c) ``bare``     a bare ``websockets`` relay exchanging the same four frames per message
                   (send, ack, delivery, delivery ack): no auth, no validation, no ledger.

Clients pair up (client 2k talks with 2k+1) and both send into their conversation. Reported:
committed-and-delivered messages/s with a window of in-flight sends per client, and p50/p99
latency (scheduled send to the receiver's hand-over) at a fixed offered load.

    .venv/bin/python benchmarks/router_bench.py                 # 10 and 100 clients
    .venv/bin/python benchmarks/router_bench.py --clients 10 --messages 5000 --seconds 2
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from controller.events.network import network_events
from controller.network.client import connect_agent
from controller.network.protocol import MAX_FRAME_BYTES
from controller.network.router import Router
from ledger import DurableFiles, Provenance, open_ledger_writer

VARIANTS = ("durable", "nowhere", "bare")


class NowhereFiles(DurableFiles):
    """A ledger that encodes, chains and signs every record, then writes it to nowhere."""

    def write(self, fd: int, data: bytes) -> None:
        pass

    def fsync(self, fd: int) -> None:
        pass


@dataclass
class Plan:
    """What one client process does: its share of the clients, for one phase."""

    phase: str  # "throughput" or "latency"
    url: str
    tokens: list[str]
    conversations: list[str]
    messages: int  # per client, throughput phase
    window: int
    sends: int  # per client, latency phase
    interval: float  # seconds between one client's sends, latency phase


@dataclass
class Result:
    variant: str
    clients: int
    throughput: float
    p50_ms: float
    p99_ms: float
    server_cpu_us: float
    """Server process CPU time (all threads) per message in the throughput phase."""
    client_cpu_us: float
    """Client processes' CPU time per message in the throughput phase."""
    gc_pauses: GCPauses
    """The server process's garbage collections during the latency phase."""


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
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def summary(self) -> str:
        """Per generation: collections and the longest pause, e.g. ``41/1.0 4/2.1 0/-``."""
        return " ".join(
            f"{len(ms)}/{max(ms):.1f}" if ms else "0/-"
            for ms in ([s * 1000 for g, s in self.pauses if g == gen] for gen in range(3))
        )


# ---- servers ---------------------------------------------------------------------------------


@asynccontextmanager
async def router_server(
    clients: int, variant: str
) -> AsyncIterator[tuple[str, list[str], list[str]]]:
    files = NowhereFiles() if variant == "nowhere" else DurableFiles()
    with tempfile.TemporaryDirectory(prefix="router-bench-") as directory:
        async with (
            open_ledger_writer(
                Path(directory) / "ledger",
                catalog=network_events,
                definition_id="bench.router/v1",
                run_id="sr-" + "0" * 32,
                provenance=Provenance.current("bench"),
                files=files,
            ) as ledger,
            Router.serve(ledger, heartbeat_interval=30, heartbeat_timeout=120) as router,
        ):
            credentials = [router.register(f"agent-{n}") for n in range(clients)]
            conversations = []
            for n in range(0, clients, 2):
                ref = await router.open_conversation(
                    credentials[n].participant, [credentials[n + 1].participant]
                )
                conversations += [ref.conversation_id, ref.conversation_id]
            await router.dispatch()
            yield router.url, [c.token for c in credentials], conversations


@asynccontextmanager
async def bare_relay(clients: int) -> AsyncIterator[tuple[str, list[str], list[str]]]:
    """Relays the same frames with json.loads and string building; trusts everything."""
    connections: dict[str, ServerConnection] = {}
    sequence = 0

    def participant(name: str) -> dict[str, str]:
        return {"id": f"agent:{name}", "name": name}

    async def handler(websocket: ServerConnection) -> None:
        nonlocal sequence
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
        tokens = [f"agent-{n}" for n in range(clients)]
        conversations = [f"c-{n // 2 + 1}" for n in range(clients)]
        yield f"ws://127.0.0.1:{port}", tokens, conversations


async def run_variant(variant: str, clients: int, args: argparse.Namespace) -> Result:
    gc.collect()  # each server starts from the same heap, not the garbage of the one before
    server = bare_relay(clients) if variant == "bare" else router_server(clients, variant)
    async with server as (url, tokens, conversations):
        processes = min(args.client_processes, clients // 2)
        shares = [range(p * 2, clients, processes * 2) for p in range(processes)]
        members = [[n for k in share for n in (k, k + 1)] for share in shares]

        def plans(phase: str) -> list[Plan]:
            return [
                Plan(
                    phase=phase,
                    url=url,
                    tokens=[tokens[n] for n in group],
                    conversations=[conversations[n] for n in group],
                    messages=args.messages // clients,
                    window=args.window,
                    sends=max(1, round(args.offered * args.seconds / clients)),
                    interval=clients / args.offered,
                )
                for group in members
            ]

        cpu_before, clients_cpu_before = _cpu_seconds(), _cpu_seconds(resource.RUSAGE_CHILDREN)
        counted = await run_clients(plans("throughput"))
        cpu = _cpu_seconds() - cpu_before
        clients_cpu = _cpu_seconds(resource.RUSAGE_CHILDREN) - clients_cpu_before
        total = sum(r["messages"] for r in counted)
        elapsed = max(r["finished"] for r in counted) - min(r["started"] for r in counted)
        with GCPauses() as gc_pauses:
            timed = await run_clients(plans("latency"))
    latencies = sorted(x for r in timed for x in r["latencies"])
    return Result(
        variant,
        clients,
        throughput=total / elapsed,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        server_cpu_us=cpu / total * 1e6,
        client_cpu_us=clients_cpu / total * 1e6,
        gc_pauses=gc_pauses,
    )


def _cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def run_clients(plans: list[Plan]) -> list[dict[str, Any]]:
    """Start one process per plan, let all connect, start them together, collect results."""
    async with AsyncExitStack() as stack:
        processes = []
        for plan in plans:
            process = await stack.enter_async_context(
                await anyio.open_process([sys.executable, __file__, "--client-side"], stderr=None)
            )
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.send(json.dumps(plan.__dict__).encode() + b"\n")
            processes.append((process, BufferedByteReceiveStream(process.stdout)))
        for _, lines in processes:
            assert await lines.receive_until(b"\n", 64) == b"ready"
        for process, _ in processes:
            assert process.stdin is not None
            await process.stdin.send(b"go\n")
        results = [json.loads(await lines.receive_until(b"\n", 1 << 24)) for _, lines in processes]
        for process, _ in processes:
            await process.wait()
    return results


# ---- clients (separate processes, so the server keeps a core of its own) -------------------


async def client_side(plan: Plan) -> dict[str, Any]:
    count = len(plan.tokens)
    connected, go = anyio.Event(), anyio.Event()
    ready = finished = 0
    all_finished = anyio.Event()
    latencies: list[float] = []
    measured: dict[str, Any] = {}

    async def client(n: int) -> None:
        nonlocal ready, finished
        async with connect_agent(plan.url, plan.tokens[n]) as session:
            ready += 1
            if ready == count:
                connected.set()
            conversation = plan.conversations[n]

            async def receive(total: int, on_message: Any) -> None:
                if total == 0:
                    return
                received = 0
                async with aclosing(session.deliveries()) as stream:
                    async for delivery in stream:
                        on_message(delivery)
                        received += 1
                        if received == total:
                            return

            await go.wait()
            async with anyio.create_task_group() as tasks:
                if plan.phase == "throughput":  # a window of sends in flight
                    window = anyio.Semaphore(plan.window)

                    async def send_one(k: int) -> None:
                        try:
                            await session.send(conversation, f"message {k} from {n}")
                        finally:
                            window.release()

                    tasks.start_soon(receive, plan.messages, lambda _d: None)
                    for k in range(plan.messages):
                        await window.acquire()
                        tasks.start_soon(send_one, k)
                else:  # an open-loop schedule: each send at its time, whatever came before

                    def record(delivery: Any) -> None:
                        latencies.append(anyio.current_time() - float(delivery.parts[0]))

                    async def send_at(due: float) -> None:
                        await session.send(conversation, repr(due))

                    start = anyio.current_time() + 0.1 + plan.interval * n / count
                    tasks.start_soon(receive, plan.sends, record)
                    for k in range(plan.sends):
                        due = start + k * plan.interval
                        await anyio.sleep_until(due)
                        tasks.start_soon(send_at, due)
            finished += 1
            if finished == count:
                all_finished.set()
            await all_finished.wait()  # keep every session up until all are done

    async with anyio.create_task_group() as tasks:
        for n in range(count):
            tasks.start_soon(client, n)
        with anyio.fail_after(120):
            await connected.wait()
        print("ready", flush=True)
        assert (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() == "go"
        measured["started"] = time.time()
        go.set()
        await all_finished.wait()
        measured["finished"] = time.time()
    measured["messages"] = plan.messages * count
    measured["latencies"] = latencies
    return measured


# ---- report ----------------------------------------------------------------------------------


def report(results: list[Result]) -> None:
    print(
        f"{'clients':>7} {'server':>8} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'server CPU us/msg':>17} {'client CPU us/msg':>17} {'GC gen0 gen1 gen2':>23}"
    )
    for r in results:
        print(
            f"{r.clients:>7} {r.variant:>8} {r.throughput:>9.0f} {r.p50_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {r.server_cpu_us:>17.0f} {r.client_cpu_us:>17.0f} "
            f"{r.gc_pauses.summary():>23}"
        )
    print()
    for clients in sorted({r.clients for r in results}):
        by = {r.variant: r for r in results if r.clients == clients}
        if set(by) != set(VARIANTS):
            continue
        a, b, c = by["durable"], by["nowhere"], by["bare"]
        print(
            f"{clients} clients: throughput (a)/(b) = {a.throughput / b.throughput:.2f} "
            f"(target >= 0.6), (a)/(c) = {a.throughput / c.throughput:.2f} (target >= 0.4); "
            f"p99 (a)/(c) = {a.p99_ms / c.p99_ms:.2f} (target <= 2)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--messages", type=int, default=10_000, help="total per throughput run")
    parser.add_argument("--window", type=int, default=16, help="in-flight sends per client")
    parser.add_argument("--offered", type=float, default=1000.0, help="messages/s for latency")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of the latency run")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument(
        "--client-processes", type=int, default=1, help="processes the clients are spread over"
    )
    parser.add_argument("--client-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client_side:
        plan = Plan(**json.loads(sys.stdin.readline()))
        print(json.dumps(anyio.run(client_side, plan)), flush=True)
        return
    results = []
    for clients in args.clients:
        if clients % 2:
            parser.error("clients pair up; use an even number")
        for variant in args.variants:
            result = anyio.run(run_variant, variant, clients, args)
            print(
                f"  {variant:>8} x {clients:>3}: {result.throughput:.0f} msgs/s, "
                f"p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
                f"CPU/msg: server {result.server_cpu_us:.0f} us, "
                f"clients {result.client_cpu_us:.0f} us; GC (count/longest ms per generation) "
                f"{result.gc_pauses.summary()}",
                file=sys.stderr,
            )
            results.append(result)
    report(results)


if __name__ == "__main__":
    main()
