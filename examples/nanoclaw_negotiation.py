"""Two NanoClaw agents haggle over a bike, keyless, on the run's local model.

    society run examples/nanoclaw_negotiation.py

Each agent is a NanoClaw-style runner around the Claude Agent SDK (pinned;
``scripts/install-nanoclaw.sh``) in its own sandbox, with no built-in tool and ``send_message``
as its only tool. Keyless: the run serves SmolLM2-135M-Instruct locally behind the run's model
gateway, which the SDK's CLI reaches as Anthropic Messages and which measures every call. A
``market`` endpoint opens one conversation with sam (selling) and bea (buying); each agent's
replies are sent by its own router connection, up to its turn budget. The program records the
last price each named. Grade it with ``society grade examples/graders/nanoclaw_negotiation.py
<ledger>``.
"""

from __future__ import annotations

import re
from typing import ClassVar

import anyio

from controller import Event, EventCatalog, NanoClawRuntime, RunContext, RunSpec, nanoclaw

TURNS = 2
"""Each agent's reply budget (one result of its session per reply)."""
TOKEN_BUDGET = 20_000
"""Each agent's model tokens, enforced by the run's model gateway (a trimmed turn is a few
hundred tokens; the gateway reserves one per request byte, ~3k for the SDK's request)."""
DEADLINE_S = 240.0
QUIET_S = 120.0
PRICE = re.compile(r"\$\s?(\d{2,5})|(\d{2,5})\s?(?:dollars|usd|coins|\$)", re.IGNORECASE)


class PricePositions(Event):
    """The last price each agent named (``None``: it named none)."""

    tag: ClassVar[str] = "acme.nanoclaw-price-positions/v1"

    positions: dict[str, int | None]


nanoclaw_negotiation_events = EventCatalog.make(PricePositions)

AGENTS = {
    "sam": "You are Sam. You sell a used bike and want about $300 for it. Reply in one line.",
    "bea": "You are Bea. You want to buy a used bike and pay about $200. Reply in one line.",
}


def trader(identity: str) -> NanoClawRuntime:
    return nanoclaw(identity, max_turns=TURNS, token_budget=TOKEN_BUDGET)


async def negotiate(ctx: RunContext) -> dict[str, int | None]:
    sam, bea = ctx.agents.sam.agent, ctx.agents.bea.agent
    last: dict[str, int | None] = dict.fromkeys(AGENTS)
    async with ctx.network.endpoint("market") as market:
        conversation = await market.open(sam, bea)
        messages = market.messages()
        await conversation.send("Sam, Bea: a used bike is for sale. Sam, your price? Bea, yours?")
        heard = 0
        with anyio.move_on_after(DEADLINE_S):
            while heard < len(AGENTS) * TURNS:
                with anyio.move_on_after(QUIET_S) as lull:
                    message = await anext(messages, None)
                if lull.cancelled_caught or message is None:
                    break
                prices = [int(a or b) for a, b in PRICE.findall(message.text)]
                if prices:
                    last[message.sender.name] = prices[-1]
                heard += 1
    await ctx.events.emit(PricePositions(positions=last))
    return last


run_spec = RunSpec.define(
    id="acme.nanoclaw-negotiation/v1",
    events=[nanoclaw_negotiation_events],
    agents={name: trader(identity) for name, identity in AGENTS.items()},
    execute=negotiate,
)
