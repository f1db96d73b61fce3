"""A one-shot prisoner's dilemma between a dove and a hawk, each seat in turn (two runs), ranked
by payoff: a small suite whose grader reports each seat's own numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import anyio

from controller import Event, Rule, RunContext, RunSpec, ScriptedPolicy, scripted
from controller.suites import Suite


class Moves(Event):
    tag: ClassVar[str] = "acme.pd-moves/v1"
    moves: dict[str, str]


async def play(ctx: RunContext) -> None:
    seats = [handle.agent for handle in ctx.agents.values()]
    moves: dict[str, str] = {}
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(*seats)
        await conversation.send(" ".join(f"@{seat.name} move" for seat in seats))
        with anyio.move_on_after(20.0):
            async for message in host.messages():
                if message.text in ("C", "D"):
                    moves[message.sender.name] = message.text
                if len(moves) == len(seats):
                    break
    await ctx.events.emit(Moves(moves=moves))


def player(move: str) -> ScriptedPolicy:
    return ScriptedPolicy(
        rules=(Rule(match=r"@{me} move", senders=("host",), texts=(move,), limit=1),)
    )


def build(competitors: Mapping[str, str]) -> RunSpec:
    agents = {seat: scripted(player(move)) for seat, move in competitors.items()}
    return RunSpec.define(id="acme.pd/v1", events=[Moves], agents=agents, execute=play)


suite = Suite.define(
    id="pd-v1",
    competitors={"dove": "C", "hawk": "D"},
    build=build,
    matchups="pairs",
    ranking="score",
    seeds=[1],
    grader="pd_suite_grade.py",
    result="payoff",
)
