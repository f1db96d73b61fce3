"""The request pool: order, bound, and no worker left idling once the jobs run out."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from society_sandbox.network._tasks import WorkPool

pytestmark = pytest.mark.anyio


async def test_jobs_start_in_submission_order_and_workers_end_when_the_jobs_run_out() -> None:
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
        pool = WorkPool(tasks, limit=3)
        for n in range(7):
            pool.submit(job, n)
        for _ in range(5):
            await anyio.lowlevel.checkpoint()
        assert started == [0, 1, 2] and most_running == 3
        release.set()
        await pool.drained()
        assert started == list(range(7)) and most_running == 3
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        assert len(tasks._tasks) == 0  # type: ignore[attr-defined]
        pool.submit(job, 7)  # a new job after the pool went idle starts a worker again
        await pool.drained()
        assert started[-1] == 7
