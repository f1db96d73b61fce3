"""The router on loopback with real clients: commit, dispatch, fan-out, order, queues, resume."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from network_support import (
    authenticate_raw,
    deliveries,
    events,
    make_ledger,
    poll_until,
    reply,
    until_delivered,
    until_event,
)
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from controller.events.network import (
    LinkMessageDelayed,
    LinkMessageDropped,
    RouterMessageCommitted,
    RouterMessagesDelivered,
    RouterStarted,
    RouterStartFailed,
    RouterStopped,
)
from controller.network import AgentSession, Delivery, NetworkError, RouterTLS, connect_agent
from controller.network.fabric import DELIVERED_LINGER_SECONDS
from controller.network.router import Router
from ledger import LedgerWriter
from society_sandbox.network.errors import CLOSE_CODES

pytestmark = pytest.mark.anyio


async def take(session: AgentSession, count: int, within: float = 10) -> list[Delivery]:
    taken: list[Delivery] = []
    if count == 0:
        return taken
    with anyio.fail_after(within):
        async with aclosing(session.deliveries()) as stream:
            async for delivery in stream:
                taken.append(delivery)
                if len(taken) == count:
                    break
    return taken


async def none_arrive(session: AgentSession, within: float) -> bool:
    with anyio.move_on_after(within):
        await take(session, 1, within=within * 2)
        return False
    return True


async def test_every_message_is_committed_before_it_is_acknowledged_or_delivered(
    router: Router, ledger: LedgerWriter
) -> None:
    alice, bob = router.register("alice"), router.register("bob")
    await router.dispatch()
    async with (
        connect_agent(router.url, alice.token) as a,
        connect_agent(router.url, bob.token) as b,
    ):
        conversation = await a.open("bob")
        for n in range(5):
            ack = await a.send(conversation.conversation_id, f"hello {n}")
            assert len(await events(ledger, RouterMessageCommitted, message_id=ack.message_id)) == 1
            (delivery,) = await take(b, 1)
            assert delivery.message_id == ack.message_id
            assert delivery.parts == (f"hello {n}",)
            assert delivery.sender == alice.participant
            assert delivery.participants == (alice.participant, bob.participant)
        await until_delivered(ledger, "m-5")
    order: list[tuple[str, str]] = []
    async for r in _records(ledger):
        if isinstance(r.event, RouterMessageCommitted):
            order.append(("committed", r.event.message_id))
        elif isinstance(r.event, RouterMessagesDelivered):
            order += [("delivered", message_id) for message_id in r.event.message_ids]
    for n in range(1, 6):
        committed = order.index(("committed", f"m-{n}"))
        assert committed < order.index(("delivered", f"m-{n}"))


async def test_sends_before_dispatch_get_not_dispatched_and_the_client_retries(
    router: Router, ledger: LedgerWriter
) -> None:
    alice, _ = router.register("alice"), router.register("bob")
    async with connect(router.url) as raw:
        assert (await authenticate_raw(raw, alice.token))["type"] == "authenticated"
        opened = await reply(raw, {"type": "open", "requestId": "o1", "participants": ["bob"]})
        refused = await reply(
            raw,
            {
                "type": "send",
                "requestId": "s1",
                "conversationId": opened["conversationId"],
                "clientMessageId": "c1",
                "parts": ["too early"],
            },
        )
        assert refused["type"] == "error"
        assert (refused["code"], refused["requestId"]) == ("not-dispatched", "s1")
    async with connect_agent(router.url, alice.token) as a:
        conversation = await a.open("bob")
        acks = []
        async with anyio.create_task_group() as tasks:

            async def send() -> None:
                acks.append(await a.send(conversation.conversation_id, "waits for dispatch"))

            tasks.start_soon(send)
            await anyio.sleep(0.3)
            assert await events(ledger, RouterMessageCommitted) == []
            await router.dispatch()
        assert len(acks) == 1
        assert len(await events(ledger, RouterMessageCommitted)) == 1


async def test_a_conversation_message_reaches_every_other_participant(
    router: Router, ledger: LedgerWriter
) -> None:
    credentials = {name: router.register(name) for name in ("alice", "bob", "carol")}
    await router.dispatch()
    async with (
        connect_agent(router.url, credentials["alice"].token) as alice,
        connect_agent(router.url, credentials["bob"].token) as bob,
        connect_agent(router.url, credentials["carol"].token) as carol,
    ):
        group = await alice.open("bob", "carol")
        ack = await alice.send(group.conversation_id, "to everyone")
        for receiver in (bob, carol):
            (delivery,) = await take(receiver, 1)
            assert delivery.message_id == ack.message_id
        assert await none_arrive(alice, 0.2)
        reply_ack = await carol.send(group.conversation_id, "reply all")
        for receiver in (alice, bob):
            assert (await take(receiver, 1))[0].message_id == reply_ack.message_id
        for who in ("bob", "carol"):
            await until_delivered(ledger, ack.message_id, receiver_id=f"agent:{who}")


async def test_pipelined_sends_keep_per_sender_fifo_to_each_receiver(
    router: Router, ledger: LedgerWriter
) -> None:
    alice, bob = router.register("alice"), router.register("bob")
    await router.dispatch()
    async with (
        connect_agent(router.url, alice.token) as a,
        connect_agent(router.url, bob.token) as b,
    ):
        conversation = await a.open("bob")
        acks: dict[int, int] = {}

        async def send(n: int) -> None:
            acks[n] = (await a.send(conversation.conversation_id, str(n))).router_sequence

        async with anyio.create_task_group() as tasks:
            for n in range(100):
                tasks.start_soon(send, n)
        assert [acks[n] for n in range(100)] == sorted(acks.values())
        received = await take(b, 100)
        assert [d.parts[0] for d in received] == [str(n) for n in range(100)]


async def test_acknowledgements_that_arrive_together_share_one_delivery_record(
    router: Router, ledger: LedgerWriter
) -> None:
    alice, bob = router.register("alice"), router.register("bob")
    await router.dispatch()
    async with connect_agent(router.url, alice.token) as a, connect(router.url) as raw:
        await authenticate_raw(raw, bob.token)
        conversation = await a.open("bob")
        sent = [(await a.send(conversation.conversation_id, str(n))).message_id for n in range(20)]
        received: list[str] = []
        with anyio.fail_after(10):
            while len(received) < 20:
                frame = json.loads(await raw.recv())
                if frame["type"] == "delivery":
                    received.append(frame["messageId"])
        assert received == sent
        for message_id in reversed(received):  # acknowledged in an order of the receiver's own
            await raw.send(json.dumps({"type": "delivery-ack", "messageId": message_id}))
        await until_delivered(ledger, received[0], receiver_id="agent:bob")
    records = await events(ledger, RouterMessagesDelivered)
    assert {r.receiver_id for r in records} == {"agent:bob"}
    assert [m for r in records for m in r.message_ids] == list(reversed(received))
    assert len(records) < 20


async def test_each_receivers_delivery_record_falls_due_on_its_own_window(
    router: Router, ledger: LedgerWriter
) -> None:
    # One shared window made every receiver's record due at once: at 100 sessions, about 50
    # records every 50 ms, encoded in one go while every message arriving meanwhile waited.
    fabric = router.fabric
    fabric.record_delivered("m-1", "agent:early")
    await anyio.sleep(DELIVERED_LINGER_SECONDS * 0.6)
    fabric.record_delivered("m-2", "agent:late")
    # Whatever the delays, "late" falls due a full window after its own acknowledgement, later
    # than this; "early" fell due a window after its own, sooner.
    fabric.flush_delivered(due_by=anyio.current_time() + DELIVERED_LINGER_SECONDS * 0.6)
    await ledger.flushed()
    records = await events(ledger, RouterMessagesDelivered)
    assert [(r.receiver_id, r.message_ids) for r in records] == [("agent:early", ["m-1"])]

    async def both() -> bool:
        return len(await events(ledger, RouterMessagesDelivered)) == 2

    await poll_until(both)  # the router's own linger hands "late" over in its window
    records = await events(ledger, RouterMessagesDelivered)
    assert [(r.receiver_id, r.message_ids) for r in records][1] == ("agent:late", ["m-2"])


async def test_a_stalled_receiver_overflows_without_slowing_the_sender_or_others(
    tmp_path: Path,
) -> None:
    async with (
        make_ledger(tmp_path / "ledger") as ledger,
        Router.serve(ledger, receiver_capacity=32) as router,
    ):
        credentials = {name: router.register(name) for name in ("alice", "stalled", "reader")}
        await router.dispatch()
        async with (
            connect_agent(router.url, credentials["alice"].token) as alice,
            connect_agent(router.url, credentials["stalled"].token),
            connect_agent(router.url, credentials["reader"].token) as reader,
        ):
            group = await alice.open("stalled", "reader")
            started = time.monotonic()
            for batch in range(4):  # the reader keeps up; the stalled receiver never reads
                for n in range(10):
                    await alice.send(group.conversation_id, f"m{batch * 10 + n}")
                assert len(await take(reader, 10)) == 10
            assert time.monotonic() - started < 10
            share = 32 // 2  # the capacity over the two others who could send to it
            for n in range(share + 1, 41):
                dropped = await until_event(
                    ledger, LinkMessageDropped, message_id=f"m-{n}", receiver_id="agent:stalled"
                )
                assert dropped.reason == "sender-share"  # alice's share is full, not the queue
            stalled = await events(ledger, LinkMessageDropped, receiver_id="agent:stalled")
            assert len(stalled) == 40 - share
            assert await events(ledger, LinkMessageDropped, receiver_id="agent:reader") == []


async def test_a_reconnecting_client_gets_unacknowledged_deliveries_again_exactly_once(
    router: Router, ledger: LedgerWriter
) -> None:
    alice, bob = router.register("alice"), router.register("bob")
    await router.dispatch()
    async with (
        connect_agent(router.url, alice.token) as a,
        connect_agent(router.url, bob.token) as b,
    ):
        conversation = await a.open("bob")
        acks = [await a.send(conversation.conversation_id, f"m{n}") for n in range(5)]
        first = await take(b, 2)
        await poll_until(lambda: len(b._inbox) == 3)  # in bob's buffer, unacknowledged
        assert b._websocket is not None
        b._websocket.transport.abort()  # the network drops bob's connection
        await anyio.sleep(0.05)
        more = await a.send(conversation.conversation_id, "m5 (after the drop)")
        rest = await take(b, 4)
        received = [d.message_id for d in [*first, *rest]]
        assert received == [ack.message_id for ack in [*acks, more]]
        assert await none_arrive(b, 0.3)
        for message_id in received:
            await until_delivered(ledger, message_id)
        delivered = await deliveries(ledger, receiver_id="agent:bob")
        assert sorted(m for m, _ in delivered) == sorted(received)


async def test_a_new_session_of_the_same_agent_gets_what_the_last_one_left_unacknowledged(
    router: Router, ledger: LedgerWriter
) -> None:
    alice, bob = router.register("alice"), router.register("bob")
    await router.dispatch()
    async with connect_agent(router.url, alice.token) as a:
        conversation = await a.open("bob")
        acks = [await a.send(conversation.conversation_id, f"m{n}") for n in range(3)]
        async with connect_agent(router.url, bob.token) as first_life:
            (taken,) = await take(first_life, 1)
            await poll_until(lambda: len(first_life._inbox) == 2)
        async with connect_agent(router.url, bob.token) as second_life:
            rest = await take(second_life, 2)
    assert [d.message_id for d in [taken, *rest]] == [ack.message_id for ack in acks]
    for ack in acks:
        await until_delivered(ledger, ack.message_id)
    assert len(await deliveries(ledger)) == 3


async def test_a_retried_client_message_id_commits_once(
    router: Router, ledger: LedgerWriter
) -> None:
    alice, _ = router.register("alice"), router.register("bob")
    await router.dispatch()
    async with connect_agent(router.url, alice.token) as a:
        conversation = await a.open("bob")
        first = await a.send(conversation.conversation_id, "once", client_message_id="k-1")
        again = await a.send(conversation.conversation_id, "once", client_message_id="k-1")
        assert first == again
        with pytest.raises(NetworkError) as conflict:
            await a.send(conversation.conversation_id, "different", client_message_id="k-1")
        assert conflict.value.reason == "client-message-id-conflict"
    assert len(await events(ledger, RouterMessageCommitted)) == 1


async def test_two_hundred_concurrent_clients_commit_once_and_deliver_once(
    router: Router, ledger: LedgerWriter
) -> None:
    count = 200
    credentials = [router.register(f"agent-{n}") for n in range(count)]
    await router.dispatch()
    replies: list[str] = []

    async def agent(n: int) -> None:
        async with connect_agent(router.url, credentials[n].token) as session:
            if n % 2 == 0:
                await router.wait_authenticated(f"agent-{n + 1}")
                conversation = await session.open(f"agent-{n + 1}")
                await session.send(conversation.conversation_id, f"ping from {n}")
                (pong,) = await take(session, 1, within=60)
                replies.append(pong.parts[0])
            else:
                (ping,) = await take(session, 1, within=60)
                await session.send(ping.conversation_id, f"pong to {ping.parts[0]}")
                await until_delivered(ledger, "m-1", within=60)

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tasks:
            for n in range(count):
                tasks.start_soon(agent, n)
    assert len(replies) == count // 2
    committed = await events(ledger, RouterMessageCommitted)
    assert len(committed) == count
    assert len({c.message_id for c in committed}) == count

    async def all_delivered() -> bool:
        return len(await deliveries(ledger)) >= count

    await poll_until(all_delivered, within=30)
    delivered = await deliveries(ledger)
    assert sorted(delivered) == sorted(set(delivered))
    assert len(delivered) == count


async def test_policies_apply_to_roster_agent_receivers(
    router: Router, ledger: LedgerWriter
) -> None:
    bob = router.register("bob")
    await router.dispatch()
    async with (
        connect_agent(router.url, bob.token) as b,
        router.network.endpoint("workload") as workload,
    ):
        conversation = await workload.open("bob")
        async with router.network.links.disable(workload, "bob"):
            lost = await conversation.send("partitioned")
            await until_event(ledger, LinkMessageDropped, message_id=lost.message_id)
        async with router.network.links.delay(workload, "bob", 0.3):
            started = time.monotonic()
            slow = await conversation.send("delayed")
            (delivery,) = await take(b, 1)
            assert time.monotonic() - started >= 0.3
        assert delivery.message_id == slow.message_id
        await until_event(ledger, LinkMessageDelayed, message_id=slow.message_id)
        await until_delivered(ledger, slow.message_id)
        assert await deliveries(ledger, message_id=lost.message_id) == []


async def test_tls_clients_verify_the_router_against_the_run_ca(
    tmp_path: Path, ledger: LedgerWriter
) -> None:
    tls = RouterTLS.generate(["localhost", "127.0.0.1"])
    ca_file = tls.write_ca(tmp_path / "ca.pem")
    other_ca = RouterTLS.generate(["localhost"]).write_ca(tmp_path / "other-ca.pem")
    async with Router.serve(ledger, tls=tls) as router:
        assert router.url.startswith("wss://127.0.0.1:")
        alice = router.register("alice")
        router.register("bob")
        async with connect_agent(router.url, alice.token, ca_file=ca_file) as session:
            assert session.identity == alice.participant
            assert (await session.open("bob")).conversation_id == "c-1"
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1):
                async with connect_agent(router.url, alice.token, ca_file=other_ca):
                    pass
    (started,) = await events(ledger, RouterStarted)
    assert started.tls


async def test_a_silent_connection_is_closed_after_the_heartbeat_timeout(
    tmp_path: Path,
) -> None:
    async with (
        make_ledger(tmp_path / "ledger") as ledger,
        Router.serve(ledger, heartbeat_interval=0.1, heartbeat_timeout=0.6) as router,
    ):
        silent, lively = router.register("silent"), router.register("lively")
        async with connect_agent(router.url, lively.token) as session:
            connection = router._registration("lively").connection
            async with connect(router.url) as raw:
                await authenticate_raw(raw, silent.token)
                with anyio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
                    while True:
                        await raw.recv()
                assert closed.value.rcvd is not None
                assert closed.value.rcvd.code == 4008
            assert session.connected
            assert router._registration("lively").connection is connection, "lively reconnected"


async def test_a_second_connection_supersedes_the_first(router: Router) -> None:
    alice = router.register("alice")
    async with connect_agent(router.url, alice.token) as first:
        async with connect_agent(router.url, alice.token) as second:
            with pytest.raises(NetworkError) as superseded:
                await take(first, 1)
            assert superseded.value.reason == "superseded"
            assert second.connected and router.is_authenticated("alice")


async def test_authentication_is_observable_to_the_kernel(router: Router) -> None:
    alice = router.register("alice")
    assert not router.is_authenticated("alice")
    with pytest.raises(NetworkError):
        router.is_authenticated("nobody")
    async with anyio.create_task_group() as tasks:
        ready = anyio.Event()

        async def wait() -> None:
            await router.wait_authenticated("alice")
            ready.set()

        tasks.start_soon(wait)
        async with connect_agent(router.url, alice.token):
            with anyio.fail_after(5):
                await ready.wait()
            assert router.is_authenticated("alice")
    await poll_until(lambda: not router.is_authenticated("alice"))


async def test_router_start_and_stop_are_recorded(ledger: LedgerWriter) -> None:
    async with Router.serve(ledger) as router:
        port = int(router.url.rsplit(":", 1)[1])
        with pytest.raises(NetworkError) as refused:
            async with Router.serve(ledger, port=port):
                pass
        assert refused.value.reason == "router-start-failed"
    (started,) = await events(ledger, RouterStarted)
    assert started.url == router.url
    (failed,) = await events(ledger, RouterStartFailed)
    assert failed.port == port
    assert len(await events(ledger, RouterStopped)) == 1


async def test_the_protocol_frames_on_the_wire_are_camel_case_json(router: Router) -> None:
    alice = router.register("alice")
    router.register("bob")
    async with connect(router.url) as raw:
        welcome = await authenticate_raw(raw, alice.token)
        assert welcome == {
            "type": "authenticated",
            "version": 1,
            "participant": {"id": "agent:alice", "name": "alice"},
            "heartbeatIntervalSeconds": 5.0,
            "heartbeatTimeoutSeconds": 15.0,
            "maxFrameBytes": 2 * 1024 * 1024,
        }
        opened = await reply(raw, {"type": "open", "requestId": "o", "participants": ["bob"]})
        assert json.loads(json.dumps(opened))["participants"][1]["name"] == "bob"


async def _records(ledger: LedgerWriter) -> AsyncIterator[Any]:
    total = ledger.record_count
    async for record in ledger.records():
        yield record
        if record.sequence >= total - 1:
            return


async def test_the_client_closes_a_silent_router_connection_and_reconnects() -> None:
    """The agent library's heartbeat watch: a router that stops sending is left, then redialled."""
    closes: list[int | None] = []
    connections = 0
    reconnected = anyio.Event()

    async def falls_silent(websocket: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        json.loads(await websocket.recv())  # authenticate
        await websocket.send(
            json.dumps(
                {
                    "type": "authenticated",
                    "version": 1,
                    "participant": {"id": "agent:quiet", "name": "quiet"},
                    "heartbeatIntervalSeconds": 0.1,
                    "heartbeatTimeoutSeconds": 0.4,
                    "maxFrameBytes": 1 << 20,
                }
            )
        )
        if connections == 2:
            reconnected.set()
        try:
            while True:
                await websocket.recv()  # the client's heartbeats; this side never answers
        except ConnectionClosed:
            closes.append(websocket.close_code)

    async with serve(falls_silent, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with connect_agent(url, "any-token") as session:
            started = anyio.current_time()
            with anyio.fail_after(5):
                await reconnected.wait()
            assert anyio.current_time() - started >= 0.4  # not before the timeout
            assert closes[0] == CLOSE_CODES["heartbeat-timeout"]
            assert session.identity.name == "quiet"
