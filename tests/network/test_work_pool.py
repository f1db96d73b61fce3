"""The request pool: order, bound, workers reused under load, none left idling past its linger."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskGroup

from controller.network._tasks import WorkPool

pytestmark = pytest.mark.anyio

LINGER = 0.05


async def test_jobs_start_in_submission_order_and_workers_end_a_linger_after_the_jobs_run_out() -> (
    None
):
    started: list[int] = []
    release = anyio.Event()
    running = 0
    most_running = 0

    async def job(n: int) -> None:
        nonlocal running, most_running
        started.append(n)
        running += 1
        most_running = max(most_running, running)
        await release.wait()
        running -= 1

    async with anyio.create_task_group() as tasks:
        pool = WorkPool(tasks, limit=3, linger=LINGER)
        for n in range(7):
            pool.submit(job, n)
        for _ in range(5):
            await anyio.lowlevel.checkpoint()
        assert started == [0, 1, 2] and most_running == 3
        release.set()
        await pool.drained()
        assert started == list(range(7)) and most_running == 3
        await anyio.sleep(LINGER * 4)
        assert len(tasks._tasks) == 0  # type: ignore[attr-defined]
        pool.submit(job, 7)  # a new job after the pool went idle starts a worker again
        await pool.drained()
        assert started[-1] == 7


class _CountingTasks:
    """A task group that counts the tasks started through it."""

    def __init__(self, tasks: TaskGroup) -> None:
        self.tasks = tasks
        self.started = 0

    def start_soon(self, *args: Any) -> None:
        self.started += 1
        self.tasks.start_soon(*args)


async def test_a_steady_stream_of_jobs_reuses_its_workers_instead_of_spawning_per_job() -> None:
    done = 0

    async def job(commit: anyio.Event) -> None:
        nonlocal done
        await commit.wait()  # like a send waiting for its ledger commit
        done += 1

    async with anyio.create_task_group() as tasks:
        counting = _CountingTasks(tasks)
        pool = WorkPool(counting, limit=8, linger=LINGER)  # type: ignore[arg-type]
        for _ in range(50):  # a window of 4 in flight, refilled as each finishes
            commits = [anyio.Event() for _ in range(4)]
            for commit in commits:
                pool.submit(job, commit)
            await anyio.lowlevel.checkpoint()
            for commit in commits:
                commit.set()
            await pool.drained()
        assert done == 200
        assert counting.started == 4 + 1  # four workers and the one that retires idle ones
