"""One scripted agent answers a tick every 0.4 s for a while: a run slow enough to watch live."""

from __future__ import annotations

import anyio

from controller import RunSpec
from controller.agents import scripted
from controller.run import RunContext
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy

TICKS = 30
EVERY_S = 0.4

echo = ScriptedPolicy(rules=(Rule(match=r"^tick \d+$", texts=("{me} saw {text}",)),))


async def ticks(ctx: RunContext) -> int:
    async with ctx.network.endpoint("clock") as clock:
        conversation = await clock.open(ctx.agents.echo.agent)
        for number in range(1, TICKS + 1):
            await conversation.send(f"tick {number}")
            await anyio.sleep(EVERY_S)
    return TICKS


run_spec = RunSpec.define(id="tests.slow-ticks/v1", agents={"echo": scripted(echo)}, execute=ticks)
