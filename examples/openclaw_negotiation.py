"""Two OpenClaw agents haggle over a bike; the program partitions them for a while.

    society run examples/openclaw_negotiation.py

Each agent is a real OpenClaw (pinned; ``scripts/install-openclaw.sh``) in its own sandbox,
behind its own gateway, with every tool denied. Keyless: the run serves SmolLM2-135M-Instruct
locally behind the run's model gateway, which measures every call. A ``market`` endpoint opens one
conversation with sam (selling) and bea (buying). Each agent answers what it hears, up to its
turn budget. After the first replies the links between sam and bea go down in both directions:
what they say to each other is committed and dropped (``LinkMessageDropped``) while the market
still hears both. Then the links heal and the market asks for a last price. The program records
the last price each named. Grade it with
``society grade examples/graders/openclaw_negotiation.py <ledger>``.
"""

from __future__ import annotations

import re
from typing import ClassVar

import anyio

from controller import Event, EventCatalog, OpenClawRuntime, RunContext, RunSpec, openclaw

TURNS = 2
"""Each agent's reply budget (one OpenClaw ``agent`` run per reply)."""
TOKEN_BUDGET = 40_000
"""Each agent's model tokens, enforced by the run's model gateway (~2k per OpenClaw turn). The
gateway admits a call only if its worst case fits (a token per request byte, ~10k for OpenClaw's
prompt, plus its reply), so the budget leaves room for that reservation."""
PHASE_DEADLINE_S = 240.0
QUIET_S = 150.0
"""A phase also ends when no agent spoke for this long (an OpenClaw turn takes 20-90 s here)."""
PRICE = re.compile(r"\$\s?(\d{2,5})|(\d{2,5})\s?(?:dollars|usd|\$)", re.IGNORECASE)


class PartitionWindow(Event):
    """sam and bea could not reach each other while ``messages`` agent messages passed."""

    tag: ClassVar[str] = "acme.openclaw-partition-window/v1"

    links: list[list[str]]
    messages: int


class PricePositions(Event):
    """The last price each agent named (``None``: it named none)."""

    tag: ClassVar[str] = "acme.openclaw-price-positions/v1"

    positions: dict[str, int | None]


openclaw_negotiation_events = EventCatalog.make(PartitionWindow, PricePositions)

AGENTS = {
    "sam": "You are Sam. You sell a used bike and want about $300 for it. Reply in one line.",
    "bea": "You are Bea. You want to buy a used bike and pay about $200. Reply in one line.",
}


def trader(identity: str) -> OpenClawRuntime:
    return openclaw(identity, max_turns=TURNS, max_reply_tokens=48, token_budget=TOKEN_BUDGET)


async def negotiate(ctx: RunContext) -> dict[str, int | None]:
    sam, bea = ctx.agents.sam.agent, ctx.agents.bea.agent
    links = ctx.network.links
    last: dict[str, int | None] = dict.fromkeys(AGENTS)
    async with ctx.network.endpoint("market") as market:
        conversation = await market.open(sam, bea)
        messages = market.messages()

        async def hear(count: int) -> int:
            """Note each agent's last price until ``count`` messages, the deadline, or a lull."""
            heard = 0
            with anyio.move_on_after(PHASE_DEADLINE_S):
                while heard < count:
                    with anyio.move_on_after(QUIET_S) as lull:
                        message = await anext(messages, None)
                    if lull.cancelled_caught or message is None:  # a lull, or the market closed
                        break
                    price = _last_price(message.text)
                    if price is not None:
                        last[message.sender.name] = price
                    heard += 1
            return heard

        await conversation.send("Sam, Bea: a used bike is for sale. Sam, your price?")
        opening = await hear(1)
        async with links.disable(sam, bea), links.disable(bea, sam):
            await conversation.send("Bea, your offer? Sam, any discount?")
            heard = await hear(2)
        await ctx.events.emit(
            PartitionWindow(links=[[sam.id, bea.id], [bea.id, sam.id]], messages=heard)
        )
        left = len(AGENTS) * TURNS - opening - heard
        if left > 0:  # the links are back: the replies the agents may still send, or a lull
            await hear(left)
    await ctx.events.emit(PricePositions(positions=last))
    return last


def _last_price(text: str) -> int | None:
    prices = [int(a or b) for a, b in PRICE.findall(text)]
    return prices[-1] if prices else None


run_spec = RunSpec.define(
    id="acme.openclaw-negotiation/v1",
    events=[openclaw_negotiation_events],
    agents={name: trader(identity) for name, identity in AGENTS.items()},
    execute=negotiate,
)
