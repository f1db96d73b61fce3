"""Two silent scripted agents; the program emits a tick every 50 ms until it is stopped."""

from __future__ import annotations

from typing import ClassVar

import anyio

from controller import Event, EventCatalog, RunSpec
from controller.agents import scripted
from controller.run import RunContext


class Tick(Event):
    tag: ClassVar[str] = "lifecycle-test.tick/v1"

    n: int


async def tick_forever(ctx: RunContext) -> None:
    n = 0
    while True:
        await ctx.events.emit(Tick(n=n))
        n += 1
        await anyio.sleep(0.05)


run_spec = RunSpec.define(
    id="lifecycle-test.endless/v1",
    events=[EventCatalog.make(Tick)],
    agents={"alice": scripted(), "bob": scripted()},
    execute=tick_forever,
)
