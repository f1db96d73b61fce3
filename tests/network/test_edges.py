"""Bad input at the router's edges: what the ledger cannot encode, and unauthenticated peers.

Each test plays the attacker on loopback and checks that the run goes on for everyone else.
"""

from __future__ import annotations

import json
from contextlib import aclosing

import anyio
import pytest
from network_support import events, poll_until
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from controller.events.network import RouterMessageCommitted
from controller.network import AgentSession, Delivery, NetworkError, connect_agent
from controller.network.connection import EdgeLimits
from controller.network.errors import CLOSE_CODES
from controller.network.protocol import MAX_PART_BYTES, MAX_PARTS
from controller.network.router import Router
from ledger import LedgerWriter

pytestmark = pytest.mark.anyio


async def next_delivery(session: AgentSession, within: float = 10) -> Delivery:
    with anyio.fail_after(within):
        async with aclosing(session.deliveries()) as stream:
            async for delivery in stream:
                return delivery
    raise AssertionError("the session ended without a delivery")


async def test_a_message_the_ledger_cannot_encode_is_refused_and_later_messages_flow(
    router: Router, ledger: LedgerWriter
) -> None:
    bob = router.register("bob")
    await router.dispatch()
    async with (
        connect_agent(router.url, bob.token) as session,
        router.network.endpoint("host") as host,
    ):
        chat = await host.open("bob")
        with pytest.raises(ValueError, match="lone surrogate"):
            await chat.send("before \ud800 after")  # the program's own send is checked first
        with pytest.raises(NetworkError) as refused:  # and the router refuses it by itself too
            await router.submit(host.participant, chat.conversation_id, ["\udfff"])
        assert refused.value.reason == "unencodable-message"
        ack = await chat.send("still flowing")
        delivery = await next_delivery(session)
        assert (delivery.message_id, delivery.parts) == (ack.message_id, ("still flowing",))
    committed = await events(ledger, RouterMessageCommitted)
    assert [c.parts for c in committed] == [["still flowing"]]


LIMITS = EdgeLimits(max_unauthenticated=8, authenticate_within_s=1.0)


async def close_code_of(websocket: ClientConnection) -> int | None:
    """Wait (silently, like an idle attacker) until the router closes the connection."""
    try:
        while True:
            await websocket.recv()
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None


async def test_idle_unauthenticated_connections_are_capped_and_timed_out_while_agents_still_talk(
    ledger: LedgerWriter,
) -> None:
    async with Router.serve(ledger, edge_limits=LIMITS) as router:
        alice, bob = router.register("alice"), router.register("bob")
        await router.dispatch()
        codes: list[int | None] = []
        most_waiting = 0

        async def idle_attacker() -> None:
            async with connect(router.url, open_timeout=10) as websocket:
                codes.append(await close_code_of(websocket))

        async def watch_the_count() -> None:
            nonlocal most_waiting
            while True:
                most_waiting = max(most_waiting, router.edge.unauthenticated)
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as attack:
            attack.start_soon(watch_the_count)
            async with anyio.create_task_group() as attackers:
                for _ in range(40):
                    attackers.start_soon(idle_attacker)
                await anyio.sleep(0.3)  # the attackers hold every slot they can get
                with anyio.fail_after(15):
                    async with (
                        connect_agent(router.url, alice.token) as a,
                        connect_agent(router.url, bob.token) as b,
                    ):
                        chat = await a.open("bob")
                        ack = await a.send(chat.conversation_id, "through the crowd")
                        assert (await next_delivery(b)).message_id == ack.message_id
            attack.cancel_scope.cancel()
    assert most_waiting <= LIMITS.max_unauthenticated
    assert codes.count(1013) >= 40 - LIMITS.max_unauthenticated  # refused at once
    assert set(codes) <= {1013, CLOSE_CODES["heartbeat-timeout"]}  # or timed out


async def test_a_huge_first_frame_is_refused_unread_but_authenticated_frames_keep_their_limit(
    ledger: LedgerWriter,
) -> None:
    async with Router.serve(ledger, edge_limits=LIMITS) as router:
        alice, bob = router.register("alice"), router.register("bob")
        await router.dispatch()
        async with connect(router.url, max_size=None) as raw:
            await raw.send("x" * (2 * 1024 * 1024))
            assert await close_code_of(raw) == 1009  # message too big
        async with connect(router.url) as raw:
            padded = {"type": "authenticate", "versions": [1], "token": "t" * 5000}
            await raw.send(json.dumps(padded))
            assert await close_code_of(raw) == 1009
        host, port = router.url.removeprefix("ws://").split(":")
        with anyio.fail_after(5):  # no HTTP upgrade at all: dropped at the deadline
            async with await anyio.connect_tcp(host, int(port)) as stream:
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await stream.receive()
        async with (
            connect_agent(router.url, alice.token) as a,
            connect_agent(router.url, bob.token) as b,
        ):
            chat = await a.open("bob")
            big = ["p" * MAX_PART_BYTES] * MAX_PARTS  # far above the first-frame limit
            ack = await a.send(chat.conversation_id, *big)
            assert (await next_delivery(b)).parts == tuple(big)
            assert ack.router_sequence == 1


async def test_a_silent_peer_is_closed_at_the_authentication_deadline(
    ledger: LedgerWriter,
) -> None:
    async with Router.serve(ledger, edge_limits=LIMITS, heartbeat_timeout=30) as router:
        async with connect(router.url) as raw:
            started = anyio.current_time()
            assert await close_code_of(raw) == CLOSE_CODES["heartbeat-timeout"]
            assert anyio.current_time() - started < 10  # the 30 s heartbeat does not apply
        await poll_until(lambda: router.edge.unauthenticated == 0)
