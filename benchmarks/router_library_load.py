"""The agent client library as the load: the same ``Plan`` driven through ``connect_agent``.

Run by ``router_load.py --library`` in a generator process, for the library's own CPU figure.
"""

from __future__ import annotations

import sys
import time
from contextlib import aclosing
from typing import Any

import anyio
from router_load import Plan

from society_sandbox.network.client import connect_agent


async def library_load(plan: Plan) -> dict[str, Any]:
    """The same plan driven through ``connect_agent`` sessions (``window`` sender tasks each)."""
    count = len(plan.tokens)
    connected, go, all_finished = anyio.Event(), anyio.Event(), anyio.Event()
    ready = finished = 0
    latencies: list[float] = []
    measured: dict[str, Any] = {}

    async def client(n: int) -> None:
        nonlocal ready, finished
        async with connect_agent(plan.url, plan.tokens[n]) as session:
            ready += 1
            if ready == count:
                connected.set()
            conversation = plan.conversations[n]
            sends = plan.messages if plan.phase == "throughput" else plan.sends

            async def receive(total: int) -> None:
                received = 0
                async with aclosing(session.deliveries()) as stream:
                    async for delivery in stream:
                        if plan.phase == "latency":
                            latencies.append(time.monotonic() - float(delivery.parts[0]))
                        received += 1
                        if received == total:
                            return

            await go.wait()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(receive, sends)
                if plan.phase == "throughput":  # a window of senders, each one send at a time

                    async def sender(first: int) -> None:
                        for k in range(first, sends, plan.window):
                            await session.send(conversation, f"message {k} from {n}")

                    for first in range(min(plan.window, sends)):
                        tasks.start_soon(sender, first)
                else:
                    start = time.monotonic() + 0.1 + plan.interval * n / count
                    for k in range(sends):
                        due = start + k * plan.interval
                        await anyio.sleep(due - time.monotonic())
                        tasks.start_soon(session.send, conversation, repr(due))
            finished += 1
            if finished == count:
                all_finished.set()
            await all_finished.wait()  # keep every session up until all are done

    async with anyio.create_task_group() as tasks:
        for n in range(count):
            tasks.start_soon(client, n)
        with anyio.fail_after(300):
            await connected.wait()
        print("ready", flush=True)
        assert (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() == "go"
        cpu = time.process_time()
        measured["started"] = time.time()
        go.set()
        await all_finished.wait()
        measured["finished"] = time.time()
        measured["cpu"] = time.process_time() - cpu
    measured["messages"] = (plan.messages if plan.phase == "throughput" else plan.sends) * count
    measured["latencies"] = latencies
    measured["errors"] = []
    return measured
