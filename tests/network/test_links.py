"""Link semantics, on the virtual clock: long delays pass without sleeping for real."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack, aclosing
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from network_support import VIRTUAL_CLOCK, deliveries, events, until_event

from controller.events.network import (
    EndpointMessageReceived,
    LinkDown,
    LinkMessageDelayed,
    LinkMessageDropped,
    LinkMessageHeld,
    LinkPolicyCleared,
    LinkPolicySet,
    LinkUp,
    RouterMessageCommitted,
    RouterMessagesDelivered,
)
from controller.network import Delay, Deliver, Drop, Endpoint, LinkDelivery, NetworkError
from controller.network.router import Router
from ledger import LedgerWriter

pytestmark = pytest.mark.anyio

FOREVER = 10**7
"""A guard deadline on the virtual clock (time only jumps there if the test is stuck)."""


@pytest.fixture(scope="module")
def anyio_backend() -> Any:
    return VIRTUAL_CLOCK


async def next_message(endpoint: Endpoint, within: float = FOREVER) -> Any:
    with anyio.fail_after(within):
        async with aclosing(endpoint.messages()) as stream:
            async for message in stream:
                return message
    raise AssertionError("the endpoint closed")


async def nothing_arrives(endpoint: Endpoint, within: float) -> bool:
    with anyio.move_on_after(within):
        await next_message(endpoint)
        return False
    return True


@pytest.fixture
async def cast(router: Router) -> Any:
    """Three endpoints (alice, bob, carol) after dispatch; alice and carol talk to bob."""
    await router.dispatch()
    network = router.network
    async with (
        network.endpoint("alice") as alice,
        network.endpoint("bob") as bob,
        network.endpoint("carol") as carol,
    ):
        yield alice, bob, carol, await alice.open("bob"), await carol.open("bob")


async def test_a_drop_dominates_delays_wherever_it_sits_in_the_chain(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast
    links = router.network.links
    for position in range(3):
        chain: list[Any] = [Delay(30), Delay(timedelta(minutes=5))]
        chain.insert(position, Drop("partition"))
        async with AsyncExitStack() as stack:
            for verdict in chain:
                await stack.enter_async_context(
                    links.shape(alice, bob, lambda _d, v=verdict: v, repr(verdict))
                )
            lost = await to_bob.send(f"drop at {position}")
            dropped = await until_event(
                ledger, LinkMessageDropped, FOREVER, message_id=lost.message_id
            )
            assert dropped.reason == "partition"
    assert await events(ledger, LinkMessageDelayed) == []
    after = await to_bob.send("after the partition")
    assert (await next_message(bob)).message_id == after.message_id


async def test_stacked_delays_record_one_summed_total(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast
    links = router.network.links
    started_real = time.monotonic()
    async with links.delay(alice, bob, 30), links.delay("alice", "bob", timedelta(seconds=90)):
        started = anyio.current_time()
        ack = await to_bob.send("slow")
        message = await next_message(bob)
        waited = anyio.current_time() - started
    assert message.message_id == ack.message_id
    delayed = await events(ledger, LinkMessageDelayed, message_id=ack.message_id)
    assert [event.total_seconds for event in delayed] == [120.0]
    assert 120 <= waited < 121
    assert time.monotonic() - started_real < 10, "the delay slept for real"


async def test_released_holds_re_evaluate_against_the_then_active_chain(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast
    links = router.network.links
    async with AsyncExitStack() as partition:
        async with links.hold(alice, bob):
            parked = await to_bob.send("parked")
            await until_event(ledger, LinkMessageHeld, FOREVER, message_id=parked.message_id)
            await partition.enter_async_context(links.disable(alice, bob))
        dropped = await until_event(
            ledger, LinkMessageDropped, FOREVER, message_id=parked.message_id
        )
        assert dropped.reason == "link-down"

    async with links.hold(alice, bob):
        waiting = await to_bob.send("waiting")
        await until_event(ledger, LinkMessageHeld, FOREVER, message_id=waiting.message_id)
        assert await nothing_arrives(bob, within=3600)
    assert (await next_message(bob)).message_id == waiting.message_id
    assert len(await events(ledger, LinkMessageHeld, message_id=waiting.message_id)) == 1


async def test_an_active_delay_keeps_per_sender_fifo_without_blocking_other_senders(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, alice_to_bob, carol_to_bob = cast
    started = anyio.current_time()
    async with router.network.links.delay(alice, bob, 60):
        a1 = await alice_to_bob.send("a1")
        a2 = await alice_to_bob.send("a2")
        c1 = await carol_to_bob.send("c1")
        first = await next_message(bob)
        assert first.message_id == c1.message_id
        assert anyio.current_time() - started < 1
    a3 = await alice_to_bob.send("a3 (sent after the delay ended, still behind a1 and a2)")
    rest = [await next_message(bob) for _ in range(3)]
    assert [m.message_id for m in rest] == [a1.message_id, a2.message_id, a3.message_id]
    assert anyio.current_time() - started >= 60
    assert len(await events(ledger, LinkMessageDelayed)) == 2


async def test_shaping_an_unknown_receiver_fails_fast(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, *_ = cast
    links = router.network.links
    attempts = [
        lambda: links.disable(alice, "nobody"),
        lambda: links.delay("alice", "nobody", 1),
        lambda: links.hold("nobody", alice),
        lambda: links.shape(alice, "nobody", lambda _d: Deliver(), "never"),
    ]
    for attempt in attempts:
        with pytest.raises(NetworkError) as refused:
            attempt()
        assert refused.value.reason == "unknown-participant"
    with pytest.raises(NetworkError) as same:
        links.disable(alice, "alice")
    assert same.value.reason == "same-participant"
    assert await events(ledger, LinkPolicySet) == []
    assert await events(ledger, LinkDown) == []


async def test_overlapping_disables_share_one_link_down_and_one_link_up(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast
    links = router.network.links
    release_first, release_second = anyio.Event(), anyio.Event()
    first_done = anyio.Event()

    async def partition(release: anyio.Event, done: anyio.Event | None = None) -> None:
        async with links.disable(alice, bob):
            await release.wait()
        if done is not None:
            done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(partition, release_first, first_done)
        tasks.start_soon(partition, release_second)
        await until_event(ledger, LinkDown, FOREVER)
        release_first.set()
        await first_done.wait()
        lost = await to_bob.send("still partitioned")
        await until_event(ledger, LinkMessageDropped, FOREVER, message_id=lost.message_id)
        assert await events(ledger, LinkUp) == []
        release_second.set()
    assert len(await events(ledger, LinkDown)) == 1
    assert len(await events(ledger, LinkUp)) == 1
    after = await to_bob.send("link is up")
    assert (await next_message(bob)).message_id == after.message_id


async def test_a_dropped_message_is_committed_but_never_delivered(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast
    async with router.network.links.disable(alice, bob):
        lost = await to_bob.send("lost")
        await until_event(ledger, LinkMessageDropped, FOREVER, message_id=lost.message_id)
    after = await to_bob.send("after")
    assert (await next_message(bob)).message_id == after.message_id
    assert len(await events(ledger, RouterMessageCommitted, message_id=lost.message_id)) == 1
    assert await deliveries(ledger, message_id=lost.message_id) == []
    assert await events(ledger, EndpointMessageReceived, message_id=lost.message_id) == []
    assert len(await deliveries(ledger, message_id=after.message_id)) == 1


async def test_a_content_dependent_policy_is_ordinary_code(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast

    def censor(delivery: LinkDelivery) -> Deliver | Drop | Delay:
        if "secret" in delivery.message.text:
            return Drop("censored")
        if delivery.message.text.startswith("slow"):
            return Delay(5)
        return Deliver()

    async with router.network.links.shape(alice, bob, censor, "censor secrets") as scope:
        assert scope is None
        secret = await to_bob.send("the secret plan")
        slow = await to_bob.send("slow news")
        plain = await to_bob.send("plain news")
        received = [await next_message(bob), await next_message(bob)]
    assert [m.message_id for m in received] == [slow.message_id, plain.message_id]
    dropped = await events(ledger, LinkMessageDropped, message_id=secret.message_id)
    assert [d.reason for d in dropped] == ["censored"]
    (policy_set,) = await events(ledger, LinkPolicySet)
    assert policy_set.description == "censor secrets"
    (cleared,) = await events(ledger, LinkPolicyCleared)
    assert cleared.policy_id == policy_set.policy_id


async def test_a_coroutine_policy_is_refused_at_the_call(router: Router, cast: Any) -> None:
    alice, bob, *_ = cast

    async def slow_policy(_delivery: LinkDelivery) -> Deliver:
        return Deliver()

    with pytest.raises(TypeError, match="plain function"):
        router.network.links.shape(alice, bob, slow_policy, "async")  # type: ignore[arg-type]


async def test_a_policy_that_raises_drops_with_reason_policy_error(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast

    def broken(_delivery: LinkDelivery) -> Deliver:
        raise RuntimeError("bug in the experiment")

    async with router.network.links.shape(alice, bob, broken, "broken"):
        lost = await to_bob.send("m")
        dropped = await until_event(ledger, LinkMessageDropped, FOREVER, message_id=lost.message_id)
    assert dropped.reason == "policy-error"


async def test_link_control_is_recorded_before_it_takes_effect(
    router: Router, ledger: LedgerWriter, cast: Any
) -> None:
    alice, bob, _, to_bob, _ = cast
    async with router.network.links.delay(alice, bob, 1):
        ack = await to_bob.send("m")
        await next_message(bob)
    tags: list[tuple[str, str | None]] = []
    async for r in _records(ledger):
        event = r.event
        ids = event.message_ids if isinstance(event, RouterMessagesDelivered) else [None]
        tags += [(type(event).__name__, m or getattr(event, "message_id", None)) for m in ids]
    names = [name for name, _ in tags]
    set_at = names.index("LinkPolicySet")
    delayed_at = tags.index(("LinkMessageDelayed", ack.message_id))
    delivered_at = tags.index(("RouterMessagesDelivered", ack.message_id))
    assert set_at < delayed_at < delivered_at


async def _records(ledger: LedgerWriter) -> Any:
    total = ledger.record_count
    async for record in ledger.records():
        yield record
        if record.sequence >= total - 1:
            return
