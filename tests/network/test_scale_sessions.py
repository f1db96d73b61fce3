"""A thousand authenticated sessions on one router: each sends and receives, exactly once."""

from __future__ import annotations

import os
import resource
from collections import Counter
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest
from network_support import make_ledger

from controller.events.network import RouterMessageCommitted, delivered_pairs, network_events
from controller.network import Delivery, connect_agent
from controller.network.router import Router
from ledger import open_ledger_artifacts

pytestmark = pytest.mark.anyio

SESSIONS = 1000
MESSAGES = 2  # per session
DEFAULT_SOFT_LIMIT = 1024
"""The soft open-files limit many systems start a process with (the hard one is far higher)."""


@pytest.fixture
def default_soft_open_files_limit() -> Iterator[None]:
    """Start from the common default soft limit; the hard limit here is 20,000."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 4 * SESSIONS, f"this test needs a hard open-files limit of {4 * SESSIONS}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (DEFAULT_SOFT_LIMIT, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


@pytest.mark.slow
async def test_a_thousand_sessions_each_send_and_receive_once_and_the_ledger_verifies(
    tmp_path: Path, default_soft_open_files_limit: None
) -> None:
    received: list[tuple[str, Delivery]] = []  # (receiver id, delivery)
    acknowledged: list[str] = []
    sockets_at_peak = 0
    async with make_ledger(tmp_path / "ledger") as ledger:
        async with Router.serve(ledger, heartbeat_interval=60, heartbeat_timeout=180) as router:
            credentials = [router.register(f"agent-{n}") for n in range(SESSIONS)]
            conversations = []
            for n in range(0, SESSIONS, 2):
                ref = await router.open_conversation(
                    credentials[n].participant, [credentials[n + 1].participant]
                )
                conversations += [ref.conversation_id] * 2
            await router.dispatch()
            sockets_before = _open_sockets()
            connected = 0
            all_connected, all_done = anyio.Event(), anyio.Event()
            done = 0

            async def agent(n: int) -> None:
                nonlocal connected, done
                async with connect_agent(router.url, credentials[n].token) as session:
                    connected += 1
                    if connected == SESSIONS:
                        all_connected.set()
                    await all_connected.wait()  # every session is up at once

                    async def receive() -> None:
                        taken = 0
                        async with aclosing(session.deliveries()) as stream:
                            async for delivery in stream:
                                received.append((session.identity.id, delivery))
                                taken += 1
                                if taken == MESSAGES:
                                    return

                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(receive)
                        for k in range(MESSAGES):
                            ack = await session.send(conversations[n], f"{k} from {n}")
                            acknowledged.append(ack.message_id)
                    done += 1
                    if done == SESSIONS:
                        all_done.set()
                    await all_done.wait()

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tasks:
                    for n in range(SESSIONS):
                        tasks.start_soon(agent, n)
                    await all_connected.wait()
                    assert all(router.is_authenticated(f"agent-{n}") for n in range(SESSIONS))
                    sockets_at_peak = _open_sockets()
        receipt = await ledger.complete()

    # one socket on each side per session, far past the soft limit the process started with
    assert sockets_at_peak - sockets_before >= 2 * SESSIONS > DEFAULT_SOFT_LIMIT
    view = open_ledger_artifacts(network_events, receipt.ledger_dir)
    assert view.complete
    committed = [r.event for r in view.records if isinstance(r.event, RouterMessageCommitted)]
    delivered = list(delivered_pairs(r.event for r in view.records))
    total = SESSIONS * MESSAGES
    assert len(committed) == total
    assert sorted(c.message_id for c in committed) == sorted(acknowledged)
    assert len(set(acknowledged)) == total
    senders = Counter(c.sender_id for c in committed)
    assert senders == {f"agent:agent-{n}": MESSAGES for n in range(SESSIONS)}
    # each message reached the other member of its conversation once, and only there
    sender_of = {c.message_id: c.sender_id for c in committed}
    peer = {f"agent:agent-{n}": f"agent:agent-{n ^ 1}" for n in range(SESSIONS)}
    expected = sorted((m, peer[s]) for m, s in sender_of.items())
    assert sorted((d.message_id, r) for r, d in received) == expected
    assert sorted(delivered) == expected
    # and in each sender's order
    by_receiver: dict[str, list[int]] = {}
    for receiver, delivery in received:
        by_receiver.setdefault(receiver, []).append(int(delivery.parts[0].split()[0]))
    assert all(order == list(range(MESSAGES)) for order in by_receiver.values())
