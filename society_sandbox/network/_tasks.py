"""Task helpers: a task group owned by a block, a pool of worker tasks, and a wake-up signal."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup


@asynccontextmanager
async def owned_task_group() -> AsyncIterator[TaskGroup]:
    """Tasks live as long as the block; leaving it cancels them.

    An exception from the block itself is re-raised as it is (not inside an ``ExceptionGroup``),
    so a caller's ``except ValueError`` around the block keeps working; failing tasks still raise
    an ``ExceptionGroup``.
    """
    body_error: BaseException | None = None
    async with anyio.create_task_group() as tasks:
        try:
            yield tasks
        except BaseException as exc:
            body_error = exc
        finally:
            tasks.cancel_scope.cancel()
    if body_error is not None:
        raise body_error


class WorkPool:
    """Runs jobs on up to ``limit`` tasks of ``tasks``, started as the load needs them.

    Spawning a task per message costs more than handling the message; a pool keeps the
    concurrency (each job may wait for a ledger commit) without the spawn while jobs keep
    coming. A worker ends as soon as it finds no job, rather than idling until the connection
    closes: idle workers are long-lived objects that every full garbage collection walks, and
    cancelling them at the close leaves cycles (task, frame, traceback) only a full collection
    frees. Jobs start in submission order, and each runs to its first suspension before the
    next one starts. A job handles its own errors, as a task would.
    """

    def __init__(self, tasks: TaskGroup, limit: int) -> None:
        self._tasks = tasks
        self._limit = limit
        self._workers = 0
        self._running = 0
        self._jobs: deque[tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]] = deque()
        self._drained: anyio.Event | None = None

    def submit(self, job: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._jobs.append((job, args))
        # a worker started but not yet running takes a queued job; start one only if none is
        if self._workers < self._limit and self._workers - self._running < len(self._jobs):
            self._workers += 1
            self._tasks.start_soon(self._work)

    async def drained(self) -> None:
        """Return once every job submitted so far has finished."""
        while self._jobs or self._running:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    async def _work(self) -> None:
        try:
            while self._jobs:
                job, args = self._jobs.popleft()
                self._running += 1
                try:
                    await job(*args)
                finally:
                    self._running -= 1
                    del job, args  # the job's arguments are not kept alive by this frame
        finally:
            self._workers -= 1
            if self._drained is not None and not self._jobs and not self._running:
                self._drained.set()
                self._drained = None


class Signal:
    """Wakes every current waiter; waiters check their condition before waiting.

    An ``asyncio.Event`` underneath: the network layer runs on asyncio only (``websockets``'
    asyncio implementation), and ``anyio.Event()`` looks up the running backend on every
    creation, which cost more than the rest of a wake-up (one per delivered message).
    Cancellation by an anyio cancel scope reaches a waiter as it reaches any asyncio await.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def notify(self) -> None:
        if self._event is not None:  # nobody waits: nothing to do (the common case)
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()
