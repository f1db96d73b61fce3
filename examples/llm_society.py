"""A town of 100 LLM agents, five turns each, on one machine's local model.

    society run examples/llm_society.py
    society grade examples/graders/llm_society_grade.py <ledger-dir>

Keyless: with no provider named, the run serves SmolLM2-135M-Instruct locally behind the run's
model gateway, with a slot per agent as far as the machine allows (llama.cpp's parallel server
decodes the calls in flight in one batch). A ``town-hall`` endpoint seats the residents at tables
of five, one conversation per table, and asks each table which project the square should get.
Every message at a table is a turn for the others there; each resident stops after five model
calls (its turn budget). A table that falls quiet while some of its residents still have turns
is asked again. The program records each table's talk and the town's tally of the projects
named; the grader reads them back with the gateway's usage per agent.

``society_spec(residents, turns)`` makes a smaller town (the tests run eight residents).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import ClassVar

import anyio

from controller import (
    LLM_RESOURCES,
    Budget,
    ContextPolicy,
    Event,
    EventCatalog,
    LLMRuntime,
    ReplyPolicy,
    RunContext,
    RunSpec,
    llm,
)

RESIDENTS = 100
TURNS = 5
TABLE_SIZE = 5
QUIET_S = 60.0
"""A table with no message for this long, and residents with turns left, is asked again."""
DEADLINE_S = 900.0
PROJECTS = ("fountain", "garden", "market")
TRADES = (
    "baker", "teacher", "farmer", "nurse", "carpenter", "grocer", "painter", "mechanic",
    "librarian", "fisher",
)  # fmt: skip
TASK = (
    "The town square gets one new project: a fountain, a garden or a market. Say which one you "
    "want and give one short reason. Answer in one sentence."
)
RESIDENT_RESOURCES = replace(LLM_RESOURCES, cpu=0.01)
"""A resident waits on the model nearly all the time: a hundredth of a core each, so that 100 are
admitted on two cores (the model server's CPU is the run's, not an agent's)."""
PROJECT_WORD = re.compile(r"\b(" + "|".join(PROJECTS) + r")s?\b", re.IGNORECASE)


class TableTalk(Event):
    """What one table said: messages per resident and the project each named last."""

    tag: ClassVar[str] = "acme.town-table-talk/v1"

    table: int
    residents: list[str]
    messages: dict[str, int]
    choices: dict[str, str | None]
    nudges: int


class TownTally(Event):
    """The town's count of the projects its residents named last, and the winner (or a tie)."""

    tag: ClassVar[str] = "acme.town-tally/v1"

    tally: dict[str, int]
    winner: str | None
    residents_heard: int


town_events = EventCatalog.make(TableTalk, TownTally)


def identity_of(number: int) -> str:
    return f"You are a {TRADES[number % len(TRADES)]} in the town of Millbrook."


def resident(number: int, turns: int) -> LLMRuntime:
    return llm(
        identity_of(number),
        instructions=TASK,
        budget=Budget(max_turns=turns, max_tokens=4000, max_wall_s=DEADLINE_S),
        context=ContextPolicy(keep_last_messages=4, max_message_chars=200),
        reply=ReplyPolicy(max_reply_tokens=24, temperature=0.7, pause_s=0.5),
        resources=RESIDENT_RESOURCES,
    )


def tables_of(names: list[str]) -> list[list[str]]:
    return [names[i : i + TABLE_SIZE] for i in range(0, len(names), TABLE_SIZE)]


async def hold_town_meeting(ctx: RunContext) -> dict[str, int]:
    names = sorted(ctx.agents)
    tables = tables_of(names)
    table_of = {name: i for i, table in enumerate(tables) for name in table}
    messages: list[Counter[str]] = [Counter() for _ in tables]
    choices: dict[str, str | None] = dict.fromkeys(names)
    nudges = [0] * len(tables)
    last_heard = [anyio.current_time()] * len(tables)
    stopped: set[str] = set()
    async with ctx.network.endpoint("town-hall") as hall:
        conversations = []
        for table in tables:
            conversation = await hall.open(*(ctx.agents[name].agent for name in table))
            conversations.append(conversation)
            await conversation.send("Neighbours, which project should the square get?")

        async def listen() -> None:
            async for message in hall.messages():
                name = message.sender.name
                if name not in table_of:
                    continue
                table = table_of[name]
                messages[table][name] += 1
                last_heard[table] = anyio.current_time()
                named = PROJECT_WORD.findall(message.text)
                if named:
                    choices[name] = named[-1].lower()

        async def watch(name: str) -> None:
            await ctx.agents[name].termination
            stopped.add(name)

        async def nudge_quiet_tables() -> None:
            while True:
                await anyio.sleep(1.0)
                for i, table in enumerate(tables):
                    quiet = anyio.current_time() - last_heard[i] > QUIET_S
                    if quiet and not stopped.issuperset(table):
                        nudges[i] += 1
                        last_heard[i] = anyio.current_time()
                        await conversations[i].send("Anyone else? Which project, and why?")

        with anyio.move_on_after(DEADLINE_S):
            async with anyio.create_task_group() as meeting:
                meeting.start_soon(listen)
                meeting.start_soon(nudge_quiet_tables)
                async with anyio.create_task_group() as watchers:
                    for name in names:
                        watchers.start_soon(watch, name)
                await anyio.sleep(1.0)  # messages still in flight after the last turn
                meeting.cancel_scope.cancel()
    for i, table in enumerate(tables):
        await ctx.events.emit(
            TableTalk(
                table=i,
                residents=table,
                messages={name: messages[i][name] for name in table},
                choices={name: choices[name] for name in table},
                nudges=nudges[i],
            )
        )
    tally = Counter(choice for choice in choices.values() if choice is not None)
    ranked = tally.most_common(2)
    tie = len(ranked) == 2 and ranked[0][1] == ranked[1][1]
    await ctx.events.emit(
        TownTally(
            tally={project: tally[project] for project in PROJECTS},
            winner=None if not ranked or tie else ranked[0][0],
            residents_heard=sum(1 for counter in messages for n in counter.values() if n),
        )
    )
    return dict(tally)


def society_spec(residents: int = RESIDENTS, turns: int = TURNS) -> RunSpec:
    """A town of ``residents`` llm agents (``r000``, ``r001``, ...), ``turns`` model calls each."""
    return RunSpec.define(
        id="acme.llm-society/v1",
        events=[town_events],
        agents={f"r{number:03d}": resident(number, turns) for number in range(residents)},
        execute=hold_town_meeting,
    )


run_spec = society_spec()
