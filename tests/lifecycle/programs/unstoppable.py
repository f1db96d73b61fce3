"""Two silent scripted agents and a program no cancellation ends: ``$HOLD=block`` blocks the
event loop in a synchronous sleep, ``$HOLD=swallow`` catches every cancellation and waits again.
Only a signal handled outside the event loop stops its run."""

from __future__ import annotations

import asyncio
import os
import time

from controller import RunSpec
from controller.agents import scripted
from controller.run import RunContext


async def never_end(ctx: RunContext) -> None:
    if os.environ["HOLD"] == "block":
        time.sleep(3600)  # noqa: ASYNC251 -- synchronous code: the event loop never runs again
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


run_spec = RunSpec.define(
    id="lifecycle-test.unstoppable/v1",
    agents={"alice": scripted(), "bob": scripted()},
    execute=never_end,
)
