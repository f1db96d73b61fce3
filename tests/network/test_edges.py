"""Bad input at the router's edges: what the ledger cannot encode, and unauthenticated peers.

Each test plays the attacker on loopback and checks that the run goes on for everyone else.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from network_support import events, make_ledger, poll_until
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from controller.events.network import (
    LinkMessageDropped,
    RouterMessageCommitted,
    RouterMessageRefused,
)
from controller.network import AgentSession, Delivery, NetworkError, connect_agent
from controller.network.connection import EdgeLimits
from controller.network.links import POLICY_ERROR_REASON, Drop
from controller.network.router import Router, RouterCredential
from ledger import LedgerWriter
from society_sandbox.network.errors import CLOSE_CODES, ERROR_CODES
from society_sandbox.network.protocol import MAX_PART_BYTES, MAX_PARTS

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
    [refused_record] = await events(ledger, RouterMessageRefused)  # the refusal is evidence
    assert (refused_record.sender_id, refused_record.reason) == (
        host.participant.id,
        "unencodable-message",
    )


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
            try:
                async with connect(router.url, open_timeout=10) as websocket:
                    codes.append(await close_code_of(websocket))
            except (OSError, InvalidHandshake):
                codes.append(None)  # closed at accept, before its upgrade

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
    assert 0 < most_waiting <= LIMITS.max_unauthenticated
    assert len(codes) == 40 and codes.count(None) > 0  # the rest refused at once
    assert set(codes) <= {None, CLOSE_CODES["heartbeat-timeout"]}  # or timed out


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_sockets_that_never_finish_the_upgrade_count_against_the_cap_and_are_shut_at_once(
    ledger: LedgerWriter,
) -> None:
    limits = EdgeLimits(max_unauthenticated=8, authenticate_within_s=10.0)
    async with Router.serve(ledger, edge_limits=limits) as router:
        host, port = router.url.removeprefix("ws://").split(":")
        before = open_descriptors()
        shut: list[float] = []

        async def half_open_attacker() -> None:  # TCP only: no HTTP upgrade, ever
            async with await anyio.connect_tcp(host, int(port)) as stream:
                started = anyio.current_time()
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    await stream.receive()
                shut.append(anyio.current_time() - started)

        async with anyio.create_task_group() as attack:
            for _ in range(40):
                attack.start_soon(half_open_attacker)
            await poll_until(lambda: len(shut) >= 32, within=5)
            # the 8 sockets the router still holds and their 8 client ends, once closes settle
            bound = 2 * limits.max_unauthenticated + 2
            with contextlib.suppress(TimeoutError):
                await poll_until(lambda: open_descriptors() - before <= bound, within=3)
            held = open_descriptors() - before
            counted = router.edge.unauthenticated
            attack.cancel_scope.cancel()
    assert counted == limits.max_unauthenticated  # every accepted socket is counted
    assert len(shut) == 32 and max(shut) < limits.authenticate_within_s  # shut at accept
    assert held <= bound  # before: all 40 of them, and their 40 client ends


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


@dataclass
class LiveRouter:
    portal: BlockingPortal
    router: Router
    fuzzer: RouterCredential
    victim: AgentSession
    peer: AgentSession
    conversation_id: str


@pytest.fixture(scope="module")
def live_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRouter]:
    """One router with tight edge limits for every example; it must stay up for its agents."""
    directory: Path = tmp_path_factory.mktemp("edge-fuzz") / "ledger"
    with (
        start_blocking_portal("asyncio") as portal,
        portal.wrap_async_context_manager(make_ledger(directory)) as ledger,
        portal.wrap_async_context_manager(Router.serve(ledger, edge_limits=LIMITS)) as router,
    ):
        fuzzer, victim, peer = (router.register(n) for n in ("fuzzer", "victim", "peer"))
        portal.call(router.dispatch)
        with (
            portal.wrap_async_context_manager(connect_agent(router.url, victim.token)) as v,
            portal.wrap_async_context_manager(connect_agent(router.url, peer.token)) as p,
        ):
            conversation = portal.call(v.open, "peer")
            yield LiveRouter(portal, router, fuzzer, v, p, conversation.conversation_id)


def _authenticate(token: str, padding: str = "") -> str:
    frame = {"type": "authenticate", "versions": [1], "token": token}
    return json.dumps(frame) + padding


first_frames = st.one_of(
    st.integers(0, 3 * LIMITS.first_frame_bytes).map(lambda n: "x" * n),
    st.integers(1, 3 * LIMITS.first_frame_bytes).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 200_000).map(lambda n: '{"type":' * n),
    st.integers(0, 3 * LIMITS.first_frame_bytes).map(lambda n: _authenticate("t", " " * n)),
    st.integers(0, 3 * LIMITS.first_frame_bytes).map(lambda n: _authenticate("t" * n)),
    st.binary(max_size=2 * LIMITS.first_frame_bytes),
)
# Bigger than any first frame may be, far below the authenticated limit: a typed error each.
authenticated_frames = st.integers(LIMITS.first_frame_bytes, 256 * 1024).map(
    lambda n: json.dumps({"type": "send", "requestId": "r", "pad": "p" * n})
)
EDGE_CLOSES = {*CLOSE_CODES.values(), 1007, 1009, 1013}


async def _first_frame_outcome(url: str, frame: str | bytes) -> str:
    async with connect(url, max_size=None) as websocket:
        await websocket.send(frame)
        try:
            with anyio.fail_after(10):
                while True:
                    answer = json.loads(await websocket.recv())
                    assert answer["type"] == "error" and answer["code"] in ERROR_CODES, answer
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code in EDGE_CLOSES, closed
            return f"closed {closed.rcvd.code}"


async def _authenticated_outcomes(url: str, token: str, frames: list[str]) -> list[str]:
    outcomes = []
    async with connect(url, max_size=None) as websocket:
        await websocket.send(_authenticate(token))
        assert json.loads(await websocket.recv())["type"] == "authenticated"
        for frame in frames:
            await websocket.send(frame)
            with anyio.fail_after(10):
                answer = json.loads(await websocket.recv())
            outcomes.append(f"{answer['type']} {answer.get('code')}")
    return outcomes


async def _victim_still_talks(live: LiveRouter) -> None:
    with anyio.fail_after(10):
        ack = await live.victim.send(live.conversation_id, "still here")
        assert (await next_delivery(live.peer)).message_id == ack.message_id


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=first_frames, later=st.lists(authenticated_frames, max_size=3))
def test_hostile_first_frames_are_closed_typed_and_authenticated_frames_keep_their_limit(
    live_router: LiveRouter, first: str | bytes, later: list[str]
) -> None:
    live = live_router
    outcome = live.portal.call(_first_frame_outcome, live.router.url, first)
    event(outcome)
    if len(first) > LIMITS.first_frame_bytes:
        assert outcome == "closed 1009"  # refused on its header, never buffered
    outcomes = live.portal.call(_authenticated_outcomes, live.router.url, live.fuzzer.token, later)
    assert outcomes == ["error malformed-frame"] * len(later)
    live.portal.call(_victim_still_talks, live)
    assert live.router.edge.unauthenticated <= LIMITS.max_unauthenticated


async def test_a_link_policy_whose_drop_reason_the_ledger_cannot_encode_does_not_stop_the_router(
    router: Router, ledger: LedgerWriter
) -> None:
    bob = router.register("bob")
    await router.dispatch()
    async with (
        connect_agent(router.url, bob.token) as session,
        router.network.endpoint("host") as host,
    ):
        chat = await host.open("bob")
        async with router.links.shape(host, "bob", lambda _d: Drop("bad \ud800"), "hostile"):
            await chat.send("dropped")  # the policy raised: dropped as a policy error
        ack = await chat.send("after the policy")
        assert (await next_delivery(session)).message_id == ack.message_id
    [dropped] = await events(ledger, LinkMessageDropped)
    assert dropped.reason == POLICY_ERROR_REASON
