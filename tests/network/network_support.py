"""Helpers for the network tests: a virtual clock, a ledger factory and ledger queries."""

from __future__ import annotations

import asyncio
import json
import selectors
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio

import ledger.encoder
from controller.events.network import RouterMessagesDelivered, delivered_pairs, network_events
from ledger import Event, LedgerWriter, Provenance, open_ledger_writer

E = TypeVar("E", bound=Event)

IDLE_REAL_SECONDS = 0.02
"""How long the loop must sit idle (real time) before the virtual clock jumps to its next timer."""


def _worker_threads_busy() -> bool:
    """Whether an anyio worker thread (a ledger fsync) is still running: then time must not jump."""
    try:
        from anyio._backends._asyncio import _threadpool_idle_workers, _threadpool_workers

        return len(_threadpool_workers.get(set())) > len(_threadpool_idle_workers.get(deque()))
    except Exception:
        return False


class _JumpingSelector:
    """Wraps the loop's selector: a wait that finds nothing to do advances virtual time instead."""

    def __init__(self, inner: selectors.BaseSelector, loop: VirtualClockLoop) -> None:
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None or timeout <= IDLE_REAL_SECONDS:
            return self._inner.select(timeout)
        events = self._inner.select(IDLE_REAL_SECONDS)
        if not events and not _worker_threads_busy() and not self._loop.commits_waiting():
            self._loop.offset += timeout  # the next timer is due now
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps over idle waits, like Trio's ``MockClock(autojump)``.

    ``anyio.current_time``/``sleep`` read the loop's clock, so a 10-minute link delay passes in
    milliseconds of real time while the code under test sees ten minutes go by. The ledger
    writer times its checkpoints with ``time.monotonic``; while this loop lives, that reads the
    same virtual clock, or each jump would wait for the writer's real-time checkpoint timer.
    """

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0
        self.writers: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()
        """Ledgers whose commits (fsynced by a process of their own) hold the clock still."""
        self._selector = _JumpingSelector(self._selector, self)  # type: ignore[has-type]
        ledger.encoder.time = _VirtualTime(self)  # type: ignore[assignment]

    def time(self) -> float:
        return super().time() + self.offset

    def commits_waiting(self) -> bool:
        """Whether a ledger's commit is still on its way to disk: then time must not jump."""
        return any(writer.unsettled for writer in self.writers)

    def close(self) -> None:
        ledger.encoder.time = time
        super().close()


class _VirtualTime:
    """The ``time`` module as the ledger's record encoder sees it under a ``VirtualClockLoop``."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._loop = loop

    def monotonic(self) -> float:
        return time.monotonic() + self._loop.offset

    def monotonic_ns(self) -> int:
        return time.monotonic_ns() + int(self._loop.offset * 1e9)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


VIRTUAL_CLOCK = ("asyncio", {"loop_factory": VirtualClockLoop})


@asynccontextmanager
async def make_ledger(directory: Path) -> AsyncIterator[LedgerWriter]:
    async with open_ledger_writer(
        directory,
        catalog=network_events,
        definition_id="tests.network/v1",
        run_id="sr-" + "0" * 32,
        provenance=Provenance(package_version="0", python_version="3", profile="test"),
    ) as writer:
        loop = asyncio.get_running_loop()
        if isinstance(loop, VirtualClockLoop):
            loop.writers.add(writer)
        yield writer


async def events(writer: LedgerWriter, cls: type[E], **match: Any) -> list[E]:
    """The ``cls`` events committed so far whose fields equal ``match``."""
    found: list[E] = []
    total = writer.record_count
    if total == 0:
        return found
    async for record in writer.records():
        event = record.event
        if isinstance(event, cls) and all(getattr(event, k) == v for k, v in match.items()):
            found.append(event)
        if record.sequence >= total - 1:
            break
    return found


async def until_event(writer: LedgerWriter, cls: type[E], within: float = 10.0, **match: Any) -> E:
    """Wait until a ``cls`` event matching ``match`` is committed."""
    with anyio.fail_after(within):
        async for record in writer.records():
            event = record.event
            if isinstance(event, cls) and all(getattr(event, k) == v for k, v in match.items()):
                return event
    raise AssertionError(f"the ledger completed without a matching {cls.__name__}")


async def deliveries(
    writer: LedgerWriter, *, message_id: str | None = None, receiver_id: str | None = None
) -> list[tuple[str, str]]:
    """The ``(message id, receiver id)`` deliveries recorded so far that match the given ids."""
    return [
        (m, r)
        for m, r in delivered_pairs(await events(writer, RouterMessagesDelivered))
        if message_id in (None, m) and receiver_id in (None, r)
    ]


async def until_delivered(
    writer: LedgerWriter, message_id: str, *, receiver_id: str | None = None, within: float = 10.0
) -> None:
    """Wait until the delivery of ``message_id`` (to ``receiver_id``, or anyone) is recorded."""
    with anyio.fail_after(within):
        async for record in writer.records():
            for m, r in delivered_pairs([record.event]):
                if m == message_id and receiver_id in (None, r):
                    return
    raise AssertionError(f"the ledger completed without recording {message_id} delivered")


async def authenticate_raw(websocket: Any, token: str) -> dict[str, Any]:
    """Send the authenticate frame on a raw connection; the router's answer, decoded."""
    await websocket.send(json.dumps({"type": "authenticate", "versions": [1], "token": token}))
    return dict(json.loads(await websocket.recv()))


async def reply(websocket: Any, frame: dict[str, Any]) -> dict[str, Any]:
    """Send one frame on a raw connection and return the next frame that is not a heartbeat."""
    await websocket.send(json.dumps(frame))
    while True:
        answer = dict(json.loads(await websocket.recv()))
        if answer["type"] != "heartbeat":
            return answer


async def poll_until(condition: Callable[[], Awaitable[bool] | bool], within: float = 10) -> None:
    """Wait until ``condition()`` holds, checking every few milliseconds."""
    with anyio.fail_after(within):
        while True:
            holds = condition()
            if not isinstance(holds, bool):
                holds = await holds
            if holds:
                return
            await anyio.sleep(0.01)
