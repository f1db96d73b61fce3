"""Experiment endpoints: the program's participants in the controller process."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TypeVar

import anyio
import pytest
from network_support import deliveries, events, until_delivered

from controller.events.network import (
    ConversationOpened,
    EndpointClosed,
    EndpointMessageReceived,
    EndpointMessageSent,
    EndpointOpened,
)
from controller.network import NetworkError, connect_agent
from controller.network.limits import MessageLimits
from controller.network.router import Router
from ledger import LedgerWriter

pytestmark = pytest.mark.anyio
T = TypeVar("T")


async def first(stream: AsyncGenerator[T]) -> T:
    with anyio.fail_after(10):
        async with aclosing(stream):
            async for item in stream:
                return item
    raise AssertionError("the stream ended")


async def test_an_endpoint_records_what_it_opens_sends_and_receives(
    router: Router, ledger: LedgerWriter
) -> None:
    alice = router.register("alice")
    await router.dispatch()
    async with (
        connect_agent(router.url, alice.token) as agent,
        router.network.endpoint("workload") as workload,
    ):
        assert workload.participant.id == "endpoint:workload"
        conversation = await workload.open(alice.participant)
        sent = await conversation.send("Propose a plan.", "Explain the tradeoffs.")
        delivery = await first(agent.deliveries())
        assert delivery.parts == ("Propose a plan.", "Explain the tradeoffs.")
        answer = await agent.send(delivery.conversation_id, "Here is my plan.")
        received = await first(workload.messages())
        assert received.message_id == answer.message_id
        assert received.sender == alice.participant
        reply = await workload.conversation(received).send("Thanks.")
        assert (await first(agent.deliveries())).message_id == reply.message_id
        await until_delivered(ledger, reply.message_id)
    (opened,) = await events(ledger, EndpointOpened)
    assert (opened.endpoint_id, opened.name) == ("endpoint:workload", "workload")
    (conversation_opened,) = await events(ledger, ConversationOpened)
    assert conversation_opened.opened_by == "endpoint:workload"
    assert conversation_opened.participants == ["endpoint:workload", "agent:alice"]
    sent_events = await events(ledger, EndpointMessageSent)
    assert [e.message_id for e in sent_events] == [sent.message_id, reply.message_id]
    (got,) = await events(ledger, EndpointMessageReceived)
    assert (got.message_id, got.sender_id) == (answer.message_id, "agent:alice")
    assert await deliveries(ledger, message_id=answer.message_id, receiver_id=opened.endpoint_id)
    assert len(await events(ledger, EndpointClosed)) == 1


async def test_endpoint_sends_wait_for_dispatch_like_everyone_elses(router: Router) -> None:
    router.register("alice")
    async with router.network.endpoint("early") as early:
        conversation = await early.open("alice")
        with pytest.raises(NetworkError) as refused:
            await conversation.send("too soon")
        assert refused.value.reason == "not-dispatched" and refused.value.retryable
        await router.dispatch()
        await conversation.send("now")


async def test_a_closed_endpoint_refuses_to_send_and_its_stream_ends(router: Router) -> None:
    router.register("alice")
    await router.dispatch()
    async with router.network.endpoint("probe") as probe:
        conversation = await probe.open("alice")
    with pytest.raises(NetworkError) as closed:
        await conversation.send("after the scope")
    assert closed.value.reason == "endpoint-closed"
    with anyio.fail_after(5):
        assert [m async for m in probe.messages()] == []
    async with router.network.endpoint("probe") as reopened:
        assert reopened.participant == probe.participant


async def test_an_endpoint_message_obeys_the_wire_limits(router: Router) -> None:
    router.register("alice")
    await router.dispatch()
    async with router.network.endpoint("probe") as probe:
        conversation = await probe.open("alice")
        for parts in ((), ("x",) * 11, ("x" * (32 * 1024 + 1),)):
            with pytest.raises(ValueError):
                await conversation.send(*parts)
        with pytest.raises(NetworkError) as unknown:
            await probe.open("nobody")
        assert unknown.value.reason == "unknown-participant"


UNLIMITED = MessageLimits(messages_per_second=1e9, message_burst=10**9)


async def test_a_deadline_around_an_endpoints_messages_fires_while_a_flood_keeps_its_queue_full(
    ledger: LedgerWriter,
) -> None:
    async with Router.serve(ledger, message_limits=UNLIMITED) as router:
        flooder = router.register("flooder")
        await router.dispatch()
        await _read_through_a_flood(router, flooder.token)


async def _read_through_a_flood(router: Router, token: str) -> None:
    async with (
        connect_agent(router.url, token) as session,
        router.network.endpoint("host") as host,
    ):
        chat = await session.open("host")

        async def flood() -> None:
            while True:
                await session.send(chat.conversation_id, "more")

        async with anyio.create_task_group() as tasks:
            for _ in range(16):
                tasks.start_soon(flood)
            await anyio.sleep(0.5)  # the flood is ahead of the reader
            read, overran = 0, False
            started = anyio.current_time()
            with anyio.move_on_after(1) as deadline:
                async for _ in host.messages():  # the queue never runs dry
                    read += 1
                    if anyio.current_time() - started > 5:
                        overran = True  # the deadline did not fire: stop by hand
                        break
            tasks.cancel_scope.cancel()
    assert deadline.cancelled_caught and not overran and read > 0
