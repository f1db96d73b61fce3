"""Three scripted negotiators meet in every ordered pair on five seeds; who gets the bigger share?

    society suite run examples/negotiation_suite.py --artifacts artifacts
    society suite verify artifacts/negotiation-v1 --suite examples/negotiation_suite.py

Each run puts two competitors in one conversation (roster names are the competitors' names).
The first of the pair opens: a workload endpoint asks it for a proposal. Offers split 100 points
as ``PROPOSE <opener>=<a>/<responder>=<b>``; each side proposes its demands in order and accepts
any split that gives it at least its minimum. The run ends at the first ACCEPT (the program
records ``SplitAgreed``) or REJECT (no deal). The grader ``graders/negotiation_suite.py`` names
the side with the bigger agreed share as the winner; an even split or no deal is a tie.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import anyio

from controller import (
    Event,
    EventCatalog,
    ReplyDelay,
    RunContext,
    RunSpec,
    ScriptedPolicy,
    Suite,
    scripted,
)

DEADLINE_S = 10.0


class SplitAgreed(Event):
    """The two sides agreed on ``shares`` (competitor -> points out of 100)."""

    tag: ClassVar[str] = "acme.split-agreed/v1"

    shares: dict[str, int]
    proposed_by: str
    accepted_by: str


split_events = EventCatalog.make(SplitAgreed)


@dataclass(frozen=True)
class Negotiator:
    """Demands to propose in order (own share), and the least share it accepts."""

    demands: tuple[int, ...]
    minimum: int


def split(opener: str, responder: str, opener_share: int) -> str:
    return f"{opener}={opener_share}/{responder}={100 - opener_share}"


def policy(me: Negotiator, *, opener: str, responder: str, opens: bool) -> ScriptedPolicy:
    """The scripted policy that plays ``me`` in this seat of the pair."""

    def mine(share: int) -> str:
        return split(opener, responder, share if opens else 100 - share)

    return ScriptedPolicy.negotiator(
        offers=tuple(mine(share) for share in me.demands),
        accepts=tuple(mine(share) for share in range(me.minimum, 101)),
        delay=ReplyDelay(min_ms=0, max_ms=20),
    )


async def negotiate(ctx: RunContext) -> dict[str, int] | None:
    opener, responder = (handle.agent for handle in ctx.agents.values())
    async with ctx.network.endpoint("workload") as workload:
        conversation = await workload.open(opener, responder)
        await conversation.send(f"@{opener.name} please make a proposal to @{responder.name}")
        proposed_by: dict[str, str] = {}
        with anyio.move_on_after(DEADLINE_S):
            async for message in workload.messages():
                verb, _, offer = message.text.partition(" ")
                if verb == "PROPOSE":
                    proposed_by[offer] = message.sender.name
                elif verb == "REJECT":
                    return None
                elif verb == "ACCEPT" and offer in proposed_by:
                    shares = {
                        name: int(points)
                        for name, points in (part.split("=") for part in offer.split("/"))
                    }
                    await ctx.events.emit(
                        SplitAgreed(
                            shares=shares,
                            proposed_by=proposed_by[offer],
                            accepted_by=message.sender.name,
                        ),
                        correlation_id=conversation.conversation_id,
                    )
                    return shares
    return None


def build(competitors: Mapping[str, Negotiator]) -> RunSpec:
    """The first competitor opens; both sides know the seats, so offers read the same to both."""
    (opener, first), (responder, second) = competitors.items()
    seats = {"opener": opener, "responder": responder}
    return RunSpec.define(
        id="acme.negotiation-pair/v1",
        events=[split_events],
        agents={
            opener: scripted(policy(first, **seats, opens=True)),
            responder: scripted(policy(second, **seats, opens=False)),
        },
        execute=negotiate,
    )


suite = Suite.define(
    id="negotiation-v1",
    competitors={
        "hardliner": Negotiator(demands=(80, 70), minimum=70),
        "fair": Negotiator(demands=(50,), minimum=50),
        "yielder": Negotiator(demands=(60, 50, 40), minimum=30),
    },
    build=build,
    matchups="pairs",
    seeds=range(1, 6),
    grader="graders/negotiation_suite.py",
    result="winner",
)
