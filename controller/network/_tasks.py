"""Task helpers: a task group owned by a block, a pool of worker tasks, and a wake-up signal."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
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


WORKER_LINGER_SECONDS = 0.5
"""How long a worker that ran out of jobs waits for the next one before it ends (up to twice)."""


@dataclass(eq=False, slots=True)
class _Idle:
    woken: anyio.Event
    since: float
    retire: bool = False


class WorkPool:
    """Runs jobs on up to ``limit`` tasks of ``tasks``, started as the load needs them.

    Spawning a task costs more than handling a message (tens of microseconds in anyio), so a
    worker that runs out of jobs waits for the next one instead of ending: under steady load
    the same workers serve job after job and none is spawned. The worker idle most recently is
    woken first, so a light load keeps few workers busy and the rest stay idle; one retiring
    task ends the workers idle for ``linger`` seconds (checked every ``linger``), so idle
    workers, which are long-lived objects every full garbage collection walks, do not outlive
    the load by more than twice that. Jobs start in submission order, and each runs to its
    first suspension before the next one starts. A job handles its own errors, as a task would.
    """

    def __init__(
        self, tasks: TaskGroup, limit: int, *, linger: float = WORKER_LINGER_SECONDS
    ) -> None:
        self._tasks = tasks
        self._limit = limit
        self._linger = linger
        self._workers = 0
        self._running = 0
        self._jobs: deque[tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]] = deque()
        self._idle: deque[_Idle] = deque()  # oldest first; the newest is woken for a job
        self._waking = 0  # idle workers woken for a job that have not run yet
        self._retiring = False
        self._drained: anyio.Event | None = None

    def submit(self, job: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._jobs.append((job, args))
        if self._waking >= len(self._jobs):
            return  # a worker already on its way takes it
        if self._idle:
            self._waking += 1
            self._idle.pop().woken.set()
        elif self._workers < self._limit and self._workers - self._running < len(self._jobs):
            # a worker started but not yet running takes a queued job; start one only if none is
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
            while True:
                while self._jobs:
                    job, args = self._jobs.popleft()
                    self._running += 1
                    try:
                        await job(*args)
                    finally:
                        self._running -= 1
                        del job, args  # the job's arguments are not kept alive by this frame
                if self._drained is not None and not self._running:
                    self._drained.set()
                    self._drained = None
                if not await self._wait_idle():
                    return
        finally:
            self._workers -= 1

    async def _wait_idle(self) -> bool:
        """Wait for a job; False when retired with none waiting."""
        idle = _Idle(anyio.Event(), anyio.current_time())
        self._idle.append(idle)
        if not self._retiring:
            self._retiring = True
            self._tasks.start_soon(self._retire_idle)
        try:
            await idle.woken.wait()
        except BaseException:  # cancelled while idle: no later job may count on this worker
            if not idle.woken.is_set():
                self._idle.remove(idle)
            elif not idle.retire:
                self._waking -= 1
            raise
        if idle.retire:
            return bool(self._jobs)
        self._waking -= 1
        return True

    async def _retire_idle(self) -> None:
        """End the workers idle for ``linger``; runs while any worker is idle."""
        try:
            while self._idle:
                await anyio.sleep(self._linger)
                cutoff = anyio.current_time() - self._linger
                while self._idle and self._idle[0].since <= cutoff:
                    idle = self._idle.popleft()
                    idle.retire = True
                    idle.woken.set()
        finally:
            self._retiring = False


class Signal:
    """Wakes every current waiter; waiters check their condition before waiting."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def notify(self) -> None:
        if self._event is not None:  # nobody waits: nothing to do (the common case)
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
