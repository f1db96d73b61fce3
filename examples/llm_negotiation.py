"""Three LLM agents negotiate a budget; the program partitions one of them for a while.

    society run examples/llm_negotiation.py

Keyless: with no provider named, the run serves SmolLM2-135M-Instruct locally, behind the run's
model gateway. A ``chair`` endpoint opens one conversation with ada (finance), ben (engineering)
and cy (marketing) and asks for a budget. Once the agents have spoken a few times, the links
between cy and the other two go down in both directions: their messages to each other are
committed and dropped (``LinkMessageDropped``), while the chair still hears everyone. Then the
links heal and the chair asks for final numbers. Each agent stops at its turn budget (the run
stops any that is left once the talk dies down); the program records the last figure each
named. Grade it with ``society grade examples/graders/llm_negotiation_grade.py <ledger>``.
"""

from __future__ import annotations

import re
from typing import ClassVar

import anyio

from controller import (
    Budget,
    ContextPolicy,
    Delivery,
    Event,
    EventCatalog,
    LLMRuntime,
    ReplyPolicy,
    RunContext,
    RunSpec,
    llm,
)

OPENING_MESSAGES = 3
"""Agent messages before the partition."""
PARTITIONED_MESSAGES = 3
"""Agent messages while cy is cut off."""
TURNS = 3
"""Each agent's turn budget: it stops by itself after that many model calls."""
PHASE_DEADLINE_S = 60.0
CLOSING_DEADLINE_S = 90.0
QUIET_S = 30.0
"""A phase also ends when no agent spoke for this long."""
DRAIN_S = 1.0
"""Once every agent has stopped, a phase waits only this long for messages still in flight."""
FIGURE = re.compile(r"\$?\s?(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s?(k|K|thousand)?")


class PartitionWindow(Event):
    """cy could not reach ada and ben (nor they cy) while ``messages`` agent messages passed."""

    tag: ClassVar[str] = "acme.llm-partition-window/v1"

    isolated: str
    links: list[list[str]]
    messages: int


class BudgetPositions(Event):
    """The last figure each agent named (``None``: it named none), and whether they matched."""

    tag: ClassVar[str] = "acme.budget-positions/v1"

    positions: dict[str, float | None]
    agreed: bool


negotiation_events = EventCatalog.make(PartitionWindow, BudgetPositions)

TASK = (
    "The team must agree on next quarter's budget, in thousands of dollars. Name one number and "
    "give one reason. Move toward the others if that helps reach agreement."
)
AGENTS = {
    "ada": "You are Ada, the finance lead. You are careful with money and want about 40k.",
    "ben": "You are Ben, the engineering lead. You need servers and want about 90k.",
    "cy": "You are Cy, the marketing lead. You want a launch campaign and about 60k.",
}


def negotiator(identity: str) -> LLMRuntime:
    return llm(
        identity,
        instructions=TASK,
        budget=Budget(max_turns=TURNS, max_tokens=2500, max_wall_s=240),
        context=ContextPolicy(keep_last_messages=6, max_message_chars=300),
        reply=ReplyPolicy(max_reply_tokens=48, temperature=0.7, pause_s=0.3),
    )


async def negotiate(ctx: RunContext) -> dict[str, float | None]:
    ada, ben, cy = (ctx.agents[name].agent for name in AGENTS)
    links = ctx.network.links
    last: dict[str, float | None] = dict.fromkeys(AGENTS)
    async with ctx.network.endpoint("chair") as chair:
        conversation = await chair.open(ada, ben, cy)
        # A relay task reads the endpoint; a phase's lull cancels only its wait on the stream,
        # never the endpoint's iterator (a cancelled generator is closed for good).
        relay, messages = anyio.create_memory_object_stream[Delivery](64)

        async def read_endpoint() -> None:
            async with relay:
                async for message in chair.messages():
                    await relay.send(message)

        all_stopped = anyio.Event()
        lulls: list[anyio.CancelScope] = []

        async def watch_agents() -> None:
            """Once every agent stopped, no lull is worth waiting out: shorten the current one."""
            for name in AGENTS:
                await ctx.agents[name].termination
            all_stopped.set()
            for lull in lulls:
                lull.deadline = min(lull.deadline, anyio.current_time() + DRAIN_S)

        async def hear(count: int, deadline_s: float) -> int:
            """Note each agent's last figure until ``count`` messages, a deadline, or a lull."""
            heard = 0
            with anyio.move_on_after(deadline_s):
                while heard < count:
                    quiet_s = DRAIN_S if all_stopped.is_set() else QUIET_S
                    with anyio.move_on_after(quiet_s) as lull:
                        lulls[:] = [lull]
                        message = await messages.receive()
                    lulls.clear()
                    if lull.cancelled_caught:
                        break
                    figure = _last_figure(message.text)
                    if figure is not None:
                        last[message.sender.name] = figure
                    heard += 1
            return heard

        async with anyio.create_task_group() as watchers:
            watchers.start_soon(watch_agents)
            watchers.start_soon(read_endpoint)
            await conversation.send(
                "Ada, Ben, Cy: what should next quarter's budget be? Ada first."
            )
            await hear(OPENING_MESSAGES, PHASE_DEADLINE_S)
            async with links.disable(cy, ada), links.disable(ada, cy):
                async with links.disable(cy, ben), links.disable(ben, cy):
                    heard = await hear(PARTITIONED_MESSAGES, PHASE_DEADLINE_S)
            await ctx.events.emit(
                PartitionWindow(
                    isolated=cy.name,
                    links=[[cy.id, ada.id], [ada.id, cy.id], [cy.id, ben.id], [ben.id, cy.id]],
                    messages=heard,
                )
            )
            await conversation.send("Everyone can hear everyone again. Your final number, please?")
            await hear(3 * TURNS, CLOSING_DEADLINE_S)  # until every turn is spent, or a lull
            watchers.cancel_scope.cancel()
    figures = {value for value in last.values() if value is not None}
    await ctx.events.emit(
        BudgetPositions(positions=last, agreed=len(figures) == 1 and None not in last.values())
    )
    return last


def _last_figure(text: str) -> float | None:
    """The last amount in ``text``, in thousands of dollars (``40k``, ``$40,000``, ``45``)."""
    figures = []
    for number, thousands in FIGURE.findall(text):
        value = float(number.replace(",", ""))
        if not thousands and value >= 1000:
            value /= 1000
        figures.append(value)
    return figures[-1] if figures else None


run_spec = RunSpec.define(
    id="acme.llm-negotiation/v1",
    events=[negotiation_events],
    agents={name: negotiator(identity) for name, identity in AGENTS.items()},
    execute=negotiate,
)
