"""Two scripted agents take turns (alice, bob, alice, ...); each turn's words are a seeded
choice, so the same seed says the same things and another seed says other things."""

from __future__ import annotations

import anyio

from controller import RunSpec
from controller.agents import scripted
from controller.run import RunContext
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy

TURNS = 8
WORDS = tuple(f"{{me}} says {word}" for word in ("red", "green", "blue", "amber", "violet"))


def taker(partner: str) -> ScriptedPolicy:
    return ScriptedPolicy(
        rules=(
            Rule(match=r"^@{me} begin$", senders=("workload",), texts=WORDS),
            Rule(match=r" says ", senders=(partner,), texts=WORDS, limit=TURNS // 2),
        )
    )


async def turns(ctx: RunContext) -> int:
    async with ctx.network.endpoint("workload") as workload:
        conversation = await workload.open(ctx.agents.alice.agent, ctx.agents.bob.agent)
        await conversation.send("@alice begin")
        heard = 0
        with anyio.fail_after(30):
            async for _ in workload.messages():
                heard += 1
                if heard == TURNS + 1:  # alice answered "begin", then four turns each
                    break
        await anyio.sleep(0.5)  # quiescence: the last turn's delivery to bob lands too
    return heard


run_spec = RunSpec.define(
    id="tests.turns/v1",
    agents={"alice": scripted(taker("bob")), "bob": scripted(taker("alice"))},
    execute=turns,
)
