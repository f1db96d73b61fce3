"""The router's delivery stage: one bounded inbox per receiver, with the link stage in front.

A committed message enters each receiver's inbox through the lane of its sender. A lane keeps
that sender's order; a lane whose pair has policies is driven by its own task, so a delayed or
held sender never blocks the other senders' lanes, the receiver, or the router. Everything an
inbox holds counts against its capacity: deliveries in the link stage (delayed or held), ready to
send, and sent but not yet acknowledged. Each sender may hold only its share of an inbox (the
capacity over the run's other participants), so one sender's flood cannot crowd out another's
messages: an offer past the sender's share is a recorded drop with reason ``sender-share``, and
one to a full inbox a recorded drop with reason ``receiver-overflow``.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup

from controller.events.network import (
    LinkMessageDelayed,
    LinkMessageDropped,
    LinkMessageHeld,
    RouterMessagesDelivered,
)
from controller.network.links import (
    Delay,
    Deliver,
    Drop,
    Hold,
    LinkController,
    LinkDelivery,
    Verdict,
)
from ledger.errors import LedgerError
from ledger.events import Event
from ledger.writer import LedgerWriter
from society_sandbox.network._tasks import Signal
from society_sandbox.network.protocol import Delivery, Participant, encode_delivery

__all__ = ["DEFAULT_RECEIVER_CAPACITY", "Fabric", "Inbox", "Message", "Signal"]

RECEIVER_OVERFLOW = "receiver-overflow"
SENDER_SHARE = "sender-share"
DELIVERED_LINGER_SECONDS = 0.05
"""How long an acknowledged delivery waits for others to the same receiver to share its record."""
DELIVERED_PER_RECORD = 512
"""Message ids one ``RouterMessagesDelivered`` lists at most (a bound on the line's length)."""
DEFAULT_RECEIVER_CAPACITY = 1024


@dataclass(eq=False, slots=True)
class Message:
    """A committed message and, once needed, its delivery frame (shared by every receiver)."""

    delivery: Delivery
    _wire: str | None = None

    @property
    def message_id(self) -> str:
        return self.delivery.message_id

    def wire(self) -> str:
        if self._wire is None:
            self._wire = encode_delivery(self.delivery)
        return self._wire


@dataclass(eq=False, slots=True)
class _Entry:
    message: Message
    verdict: Verdict | None
    """``None``: its chain's verdict is being awaited off the loop."""
    due: float
    cleared: anyio.Event | None
    recorded: anyio.Event | None
    again: bool = False
    """Evaluated again after a hold cleared: its holding is already recorded."""


@dataclass(eq=False, slots=True)
class _Lane:
    entries: deque[_Entry] = field(default_factory=deque)
    driven: bool = False


class Inbox:
    """One receiver's deliveries: link-stage lanes, then ``ready``, then ``unacked``."""

    def __init__(self, fabric: Fabric, receiver: Participant) -> None:
        self.receiver = receiver
        self.owner: object | None = None
        """The consumer allowed to take deliveries now (a connection or an endpoint)."""
        self.changed = Signal()
        self._fabric = fabric
        self._lanes: dict[str, _Lane] = {}
        self._ready: deque[Message] = deque()
        self._unacked: dict[str, Message] = {}
        self._acked: set[str] = set()
        self._size = 0
        self._held: Counter[str] = Counter()
        """Sender id -> deliveries of that sender this inbox holds (they count in ``_size``)."""

    def take(self, owner: object) -> Message | None:
        """The next ready delivery for ``owner``, now counted as sent and unacknowledged."""
        if owner is not self.owner or not self._ready:
            return None
        message = self._ready.popleft()
        self._unacked[message.message_id] = message
        return message

    def acknowledge(self, message_id: str) -> Literal["acknowledged", "duplicate", "unknown"]:
        message = self._unacked.pop(message_id, None)
        if message is None:
            for index, ready in enumerate(self._ready):  # acked before its redelivery went out
                if ready.message_id == message_id:
                    del self._ready[index]
                    message = ready
                    break
        if message is None:
            return "duplicate" if message_id in self._acked else "unknown"
        self._acked.add(message_id)
        self._release(message)
        return "acknowledged"

    def _release(self, message: Message) -> None:
        self._size -= 1
        sender_id = message.delivery.sender.id
        self._held[sender_id] -= 1
        if not self._held[sender_id]:
            del self._held[sender_id]

    def attach(self, owner: object) -> None:
        """``owner`` consumes from now on; what the previous one left unacknowledged goes again."""
        self.owner = owner
        self.requeue_unacknowledged()
        self.changed.notify()

    def detach(self, owner: object) -> None:
        if self.owner is owner:
            self.owner = None
            self.requeue_unacknowledged()
            self.changed.notify()

    def requeue_unacknowledged(self) -> None:
        if self._unacked:
            self._ready.extendleft(reversed(self._unacked.values()))
            self._unacked.clear()

    # ---- the link stage --------------------------------------------------------------------

    def offer(self, message: Message) -> None:
        """Take a committed message from its sender (synchronous; never blocks the router).

        The pair's chain is evaluated now, as the message reaches the link stage; only a held
        message is evaluated again, when a policy on its pair clears.
        """
        fabric = self._fabric
        sender = message.delivery.sender
        if self._size >= fabric.capacity:
            fabric.record(self._dropped(message, RECEIVER_OVERFLOW))
            return
        if self._held[sender.id] >= fabric.share():
            fabric.record(self._dropped(message, SENDER_SHARE))
            return
        verdict: Verdict | None = Deliver()
        cleared = None
        pair = fabric.links.pair(sender.id, self.receiver.id)
        if pair is not None and pair.policies:
            cleared = pair.cleared
            if pair.blocking:  # awaited off the loop, in this sender's lane: only it waits
                verdict = None
            else:
                verdict = pair.evaluate(LinkDelivery(sender, self.receiver, message.delivery))
                if isinstance(verdict, Drop):
                    fabric.record(self._dropped(message, verdict.reason))
                    return
        self._size += 1
        self._held[sender.id] += 1
        lane = self._lanes.get(sender.id)
        if lane is None and isinstance(verdict, Deliver):  # nothing ahead of it: straight through
            self._make_ready(message)
            return
        # a ledger commit's callback may offer this, outside any task: the loop's own clock
        now = asyncio.get_running_loop().time()
        recorded = None
        if isinstance(verdict, Hold):
            recorded = fabric.record_before(LinkMessageHeld(**self._ids(message)))
        elif isinstance(verdict, Delay):
            recorded = fabric.record_before(
                LinkMessageDelayed(**self._ids(message), total_seconds=verdict.seconds)
            )
        if lane is None:
            lane = self._lanes[sender.id] = _Lane()
        due = now + verdict.seconds if isinstance(verdict, Delay) else now
        lane.entries.append(_Entry(message, verdict, due, cleared, recorded))
        if not lane.driven:
            lane.driven = True
            fabric.start(self._drive, sender, lane)

    def _make_ready(self, message: Message) -> None:
        self._ready.append(message)
        self.changed.notify()

    async def _drive(self, sender: Participant, lane: _Lane) -> None:
        """Release one sender's lane in order: each entry once its delay or hold is over."""
        try:
            while lane.entries:
                entry = lane.entries[0]
                if entry.verdict is None:
                    await self._evaluate_off_loop(sender, entry)
                    continue
                if entry.recorded is not None:
                    await entry.recorded.wait()  # its record is durable before it takes effect
                    entry.recorded = None
                if isinstance(entry.verdict, Hold):
                    assert entry.cleared is not None
                    await entry.cleared.wait()
                    self._reevaluate(sender, entry)
                    continue
                if isinstance(entry.verdict, Drop):
                    lane.entries.popleft()
                    self._release(entry.message)
                    continue
                if isinstance(entry.verdict, Delay):
                    await anyio.sleep_until(entry.due)
                lane.entries.popleft()
                self._make_ready(entry.message)
        finally:
            lane.driven = False
            if not lane.entries:
                del self._lanes[sender.id]

    async def _evaluate_off_loop(self, sender: Participant, entry: _Entry) -> None:
        """The verdict of a chain that waits for an answer from elsewhere, in a worker thread, so
        that the router and every other link go on meanwhile; then as ``offer`` would take it."""
        fabric = self._fabric
        pair = fabric.links.pair(sender.id, self.receiver.id)
        verdict: Verdict = Deliver()
        if pair is not None and pair.policies:
            entry.cleared = pair.cleared
            policies = list(pair.policies)
            delivery = LinkDelivery(sender, self.receiver, entry.message.delivery)
            verdict = await anyio.to_thread.run_sync(pair.evaluate, delivery, policies)
        if isinstance(verdict, Drop):
            entry.recorded = fabric.record_before(self._dropped(entry.message, verdict.reason))
        elif isinstance(verdict, Hold) and not entry.again:
            entry.recorded = fabric.record_before(LinkMessageHeld(**self._ids(entry.message)))
        elif isinstance(verdict, Delay):
            entry.due = anyio.current_time() + verdict.seconds
            entry.recorded = fabric.record_before(
                LinkMessageDelayed(**self._ids(entry.message), total_seconds=verdict.seconds)
            )
        entry.verdict = verdict

    def _reevaluate(self, sender: Participant, entry: _Entry) -> None:
        """A hold cleared: evaluate the pair's chain as it stands now."""
        fabric = self._fabric
        pair = fabric.links.pair(sender.id, self.receiver.id)
        assert pair is not None  # a held entry's pair has existed since it was held
        if pair.blocking:  # the drive loop awaits it off the loop
            entry.verdict, entry.again = None, True
            return
        entry.cleared = pair.cleared
        verdict = pair.evaluate(LinkDelivery(sender, self.receiver, entry.message.delivery))
        if isinstance(verdict, Drop):
            entry.recorded = fabric.record_before(self._dropped(entry.message, verdict.reason))
        elif isinstance(verdict, Delay):
            entry.due = anyio.current_time() + verdict.seconds
            entry.recorded = fabric.record_before(
                LinkMessageDelayed(**self._ids(entry.message), total_seconds=verdict.seconds)
            )
        entry.verdict = verdict

    def _ids(self, message: Message) -> dict[str, str]:
        return {
            "message_id": message.message_id,
            "sender_id": message.delivery.sender.id,
            "receiver_id": self.receiver.id,
        }

    def _dropped(self, message: Message, reason: str) -> LinkMessageDropped:
        return LinkMessageDropped(**self._ids(message), reason=reason)


class Fabric:
    """Every receiver's inbox, the link controller they consult and the tasks that drive lanes."""

    def __init__(
        self,
        ledger: LedgerWriter,
        links: LinkController,
        tasks: TaskGroup,
        capacity: int,
        *,
        participants: Callable[[], int] = lambda: 2,
    ) -> None:
        if capacity < 1:
            raise ValueError("a receiver's queue holds at least one delivery")
        self.links = links
        self.tasks = tasks
        self.capacity = capacity
        self._participants = participants
        self._ledger = ledger
        self._inboxes: dict[str, Inbox] = {}
        # receiver id -> (when its record is due, acknowledged message ids), in order of due time
        self._delivered: dict[str, tuple[float, list[str]]] = {}
        self._delivered_waiting = Signal()
        self._lingering = False
        self._handing: set[asyncio.Task[None]] = set()

    def start(self, drive: Callable[..., Coroutine[Any, Any, None]], *args: object) -> None:
        """Start ``drive(*args)`` in the fabric's task group, also from a ledger commit's callback,
        which runs outside any task (where the group cannot start one): a task of the loop's then
        hands it over and ends."""
        if asyncio.current_task() is not None:
            self.tasks.start_soon(drive, *args)
            return
        handing = asyncio.get_running_loop().create_task(self._hand_over(drive, args))
        self._handing.add(handing)
        handing.add_done_callback(self._handing.discard)

    async def _hand_over(
        self, drive: Callable[..., Coroutine[Any, Any, None]], args: tuple[object, ...]
    ) -> None:
        self.tasks.start_soon(drive, *args)

    def share(self) -> int:
        """The most deliveries one sender may hold in one receiver's inbox: the capacity over the
        run's other participants (each of them a possible sender), at least one."""
        return max(1, self.capacity // max(1, self._participants() - 1))

    def inbox(self, receiver: Participant) -> Inbox:
        inbox = self._inboxes.get(receiver.id)
        if inbox is None:
            inbox = self._inboxes[receiver.id] = Inbox(self, receiver)
        return inbox

    def fan_out(self, message: Message, receivers: tuple[Participant, ...]) -> None:
        for receiver in receivers:
            if receiver.id != message.delivery.sender.id:
                self.inbox(receiver).offer(message)

    def record_delivered(self, message_id: str, receiver_id: str) -> None:
        """Record that ``receiver_id`` acknowledged ``message_id``, within the linger time.

        Nothing waits for the record, so a delivery need not cost one of its own: a receiver's
        acknowledgements within ``DELIVERED_LINGER_SECONDS`` of its first become one
        ``RouterMessagesDelivered``, committed with whatever else the ledger has waiting. Each
        receiver's window is its own, so the records of many receivers do not all fall due at
        once: a burst of them would be one long encoding on the event loop and one large commit
        that every message arriving meanwhile waits behind.
        """
        waiting = self._delivered.get(receiver_id)
        if waiting is None:
            due = anyio.current_time() + DELIVERED_LINGER_SECONDS
            self._delivered[receiver_id] = (due, [message_id])
        else:
            waiting[1].append(message_id)
        if not self._lingering:
            self._lingering = True
            self.tasks.start_soon(self._linger)
        self._delivered_waiting.notify()

    def flush_delivered(self, due_by: float = float("inf")) -> None:
        """Hand the acknowledgements due by ``due_by`` (all, by default) to the ledger now."""
        delivered = self._delivered
        while delivered:
            receiver_id, (due, message_ids) = next(iter(delivered.items()))
            if due > due_by:
                return
            del delivered[receiver_id]
            for start in range(0, len(message_ids), DELIVERED_PER_RECORD):
                self.record(
                    RouterMessagesDelivered(
                        receiver_id=receiver_id,
                        message_ids=message_ids[start : start + DELIVERED_PER_RECORD],
                    )
                )

    async def settle(self) -> None:
        """Flush, then return once every record handed over so far has been appended."""
        self.flush_delivered()
        await self._ledger.flushed()

    async def _linger(self) -> None:
        while True:
            if not self._delivered:
                await self._delivered_waiting.wait()
                continue
            due = next(iter(self._delivered.values()))[0]  # the earliest: insertion order
            await anyio.sleep_until(due)
            self.flush_delivered(due_by=anyio.current_time())

    def record(self, event: Event, done: anyio.Event | None = None) -> None:
        """Append ``event`` without making the caller wait; ``done`` is set once it is durable.

        No task per record: the ledger queues it for its next group commit and calls back.
        """
        try:
            self._ledger.append_soon(
                event, producer="router", then=None if done is None else lambda _: done.set()
            )
        except LedgerError:  # the ledger latched failed or closed; the run's outcome reports it
            if done is not None:
                done.set()

    def record_before(self, event: Event) -> anyio.Event:
        """Append ``event``; what it announces may take effect once the returned event is set."""
        done = anyio.Event()
        self.record(event, done)
        return done
