"""Two scripted bidders meet in both seatings on one seed: the host asks for bids, each names
its amount, the program records every bid (``BidsSeen``); the higher bid wins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import anyio

from controller import (
    Event,
    EventCatalog,
    Rule,
    RunContext,
    RunSpec,
    ScriptedPolicy,
    Suite,
    scripted,
)


class BidsSeen(Event):
    """Each competitor's bid, and who was seated first."""

    tag: ClassVar[str] = "acme.bids-seen/v1"

    bids: dict[str, int]
    first_seat: str


bid_events = EventCatalog.make(BidsSeen)


async def auction(ctx: RunContext) -> dict[str, int]:
    seats = list(ctx.agents)
    bids: dict[str, int] = {}
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(*(handle.agent for handle in ctx.agents.values()))
        replies = host.messages()
        await conversation.send("bid")
        with anyio.fail_after(30):
            async for message in replies:
                bids[message.sender.name] = int(message.text.rpartition(" ")[2])
                if len(bids) == len(seats):
                    break
        await ctx.events.emit(BidsSeen(bids=bids, first_seat=seats[0]))
    return bids


def build(competitors: Mapping[str, int]) -> RunSpec:
    return RunSpec.define(
        id="acme.bids/v1",
        events=[bid_events],
        agents={
            name: scripted(
                ScriptedPolicy(
                    rules=(Rule(match=r"^bid$", senders=("host",), texts=(f"{{me}} bids {bid}",)),)
                )
            )
            for name, bid in competitors.items()
        },
        execute=auction,
    )


suite = Suite.define(
    id="bids-v1",
    competitors={"ann": 3, "ben": 5},
    build=build,
    matchups="pairs",
    seeds=[1],
    grader="bid_suite_grade.py",
    result="winner",
)
