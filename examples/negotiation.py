"""Two scripted agents negotiate a split; the program records consensus when one accepts.

    society run examples/negotiation.py

A workload endpoint opens a conversation with alice and bob and asks alice for a proposal.
They trade ``PROPOSE <offer>`` messages until one answers ``ACCEPT <offer>``; the program
then emits ``ConsensusReached`` and returns the agreed offer.
"""

from __future__ import annotations

from typing import ClassVar

import anyio

from controller import (
    Event,
    EventCatalog,
    ReplyDelay,
    RunContext,
    RunSpec,
    ScriptedPolicy,
    scripted,
)

DEADLINE_S = 30.0


class ConsensusReached(Event):
    """Two agents agreed on ``proposal``: the proposer and the one who accepted."""

    tag: ClassVar[str] = "acme.consensus-reached/v1"

    proposal: str
    supporters: list[str]


negotiation_events = EventCatalog.make(ConsensusReached)

alice = ScriptedPolicy.negotiator(
    offers=("split 70/30", "split 60/40", "split 55/45"),
    accepts=("split 50/50",),
    delay=ReplyDelay(min_ms=10, max_ms=50),
)
bob = ScriptedPolicy.negotiator(
    offers=("split 30/70", "split 45/55"),
    accepts=("split 55/45", "split 50/50"),
    delay=ReplyDelay(min_ms=10, max_ms=50),
)


async def negotiate(ctx: RunContext, *, deadline_s: float = DEADLINE_S) -> str | None:
    async with ctx.network.endpoint("workload") as workload:
        conversation = await workload.open(ctx.agents.alice.agent, ctx.agents.bob.agent)
        await conversation.send("@alice please make a proposal to @bob")
        proposed_by: dict[str, str] = {}
        with anyio.move_on_after(deadline_s):
            async for message in workload.messages():
                verb, _, offer = message.text.partition(" ")
                if verb == "PROPOSE":
                    proposed_by[offer] = message.sender.name
                elif verb == "ACCEPT" and offer in proposed_by:
                    await ctx.events.emit(
                        ConsensusReached(
                            proposal=offer, supporters=[proposed_by[offer], message.sender.name]
                        ),
                        correlation_id=conversation.conversation_id,
                    )
                    return offer
    return None


run_spec = RunSpec.define(
    id="acme.negotiation/v1",
    events=[negotiation_events],
    agents={"alice": scripted(alice), "bob": scripted(bob)},
    execute=negotiate,
)
