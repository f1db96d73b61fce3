"""Helpers for the network tests: a virtual clock, a ledger factory and ledger queries."""

from __future__ import annotations

import asyncio
import selectors
from collections import deque
from pathlib import Path
from typing import Any, TypeVar

import anyio

from controller.events.network import network_events
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
        if not events and not _worker_threads_busy():
            self._loop.offset += timeout  # the next timer is due now
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps over idle waits, like Trio's ``MockClock(autojump)``.

    ``anyio.current_time``/``sleep`` read the loop's clock, so a 10-minute link delay passes in
    milliseconds of real time while the code under test sees ten minutes go by.
    """

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0
        self._selector = _JumpingSelector(self._selector, self)  # type: ignore[has-type]

    def time(self) -> float:
        return super().time() + self.offset


VIRTUAL_CLOCK = ("asyncio", {"loop_factory": VirtualClockLoop})


def make_ledger(directory: Path) -> Any:
    return open_ledger_writer(
        directory,
        catalog=network_events,
        definition_id="tests.network/v1",
        run_id="sr-" + "0" * 32,
        provenance=Provenance(package_version="0", python_version="3", profile="test"),
    )


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
