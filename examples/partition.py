"""Three scripted agents; the program partitions two of them for a while, then heals the link.

    society run examples/partition.py

A workload endpoint opens one conversation with ann, ben and cat and sends ``tick N`` rounds.
Each agent answers every tick to the whole conversation. During ticks 4-6 the links between ann
and ben are down in both directions: their answers to each other are committed by the router
and never delivered (``LinkMessageDropped``); everything else still arrives. Grade it with
``society grade examples/graders/partition.py <ledger>``.
"""

from __future__ import annotations

from typing import ClassVar

import anyio

from controller import (
    Event,
    EventCatalog,
    ReplyDelay,
    Rule,
    RunContext,
    RunSpec,
    ScriptedPolicy,
    scripted,
)

TICKS = 9
PARTITIONED_TICKS = range(4, 7)
ROUND_DEADLINE_S = 10.0


class PartitionWindow(Event):
    """Ticks ``first``..``last`` were sent while the listed directed links were down."""

    tag: ClassVar[str] = "acme.partition-window/v1"

    first: int
    last: int
    links: list[list[str]]


partition_events = EventCatalog.make(PartitionWindow)

chatter = ScriptedPolicy(
    rules=(Rule(match=r"^tick \d+$", senders=("workload",), texts=("{me} saw {text}",)),),
    delay=ReplyDelay(min_ms=0, max_ms=20),
)


async def partition(ctx: RunContext) -> dict[str, int]:
    ann, ben = ctx.agents.ann.agent, ctx.agents.ben.agent
    links = ctx.network.links
    async with ctx.network.endpoint("workload") as workload:
        conversation = await workload.open(*(handle.agent for handle in ctx.agents.values()))
        replies = workload.messages()

        async def tick(number: int) -> None:
            await conversation.send(f"tick {number}")
            pending = set(ctx.agents)
            with anyio.fail_after(ROUND_DEADLINE_S):
                async for message in replies:
                    if message.text.endswith(f" saw tick {number}"):
                        pending.discard(message.sender.name)
                        if not pending:
                            return

        for number in range(1, PARTITIONED_TICKS.start):
            await tick(number)
        async with links.disable(ann, ben), links.disable(ben, ann):
            for number in PARTITIONED_TICKS:
                await tick(number)
            await anyio.sleep(0.2)  # let the agents' last answers reach the down link
        await ctx.events.emit(
            PartitionWindow(
                first=PARTITIONED_TICKS.start,
                last=PARTITIONED_TICKS.stop - 1,
                links=[[ann.id, ben.id], [ben.id, ann.id]],
            )
        )
        for number in range(PARTITIONED_TICKS.stop, TICKS + 1):
            await tick(number)
    return {"ticks": TICKS}


run_spec = RunSpec.define(
    id="acme.partition/v1",
    events=[partition_events],
    agents={name: scripted(chatter) for name in ("ann", "ben", "cat")},
    execute=partition,
)
