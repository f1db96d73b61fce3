"""A flooding agent in a real run cannot starve another: fair shares of a receiver's queue, and
each agent's message limits, refused and recorded.

The flooder is a real sandboxed scripted agent whose router session also sends as fast as the
client allows to the program's endpoint, which reads nothing until bob has answered its 20
pings. Every one of bob's answers must arrive.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from run_support import verified, with_command

from controller import Run, RunSpec
from controller.agents import scripted
from controller.events.network import (
    LinkMessageDropped,
    RouterMessageCommitted,
    RouterSendsRefused,
)
from controller.network.limits import MessageLimits
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, RunContext, Success
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy

pytestmark = pytest.mark.anyio

PINGS = 20
FLOOD_HEAD_START_S = 4.0

FLOODER = """\
import runpy, sys
from contextlib import asynccontextmanager
import anyio
import agent_images.router_session as router_session

connect = router_session.connect_agent

async def flood(session):
    while True:
        try:
            chat = await session.open("workload")
            break
        except Exception:
            await anyio.sleep(0.05)
    async def sender():
        while True:
            try:
                await session.send(chat.conversation_id, "flood " + "x" * 200)
            except Exception:
                await anyio.sleep(0.001)  # refused: push again at once
    async with anyio.create_task_group() as senders:
        for _ in range(32):
            senders.start_soon(sender)

@asynccontextmanager
async def flooding(*args, **kwargs):
    async with connect(*args, **kwargs) as session:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(flood, session)
            yield session
            tasks.cancel_scope.cancel()

router_session.connect_agent = flooding
sys.argv = ["agent_images.scripted"]
runpy.run_module("agent_images.scripted", run_name="__main__", alter_sys=True)
"""


async def execute(ctx: RunContext) -> int:
    async with ctx.network.endpoint("workload") as workload:
        chat = await workload.open("bob")
        await anyio.sleep(FLOOD_HEAD_START_S)  # the flood fills the workload's queue meanwhile
        for n in range(PINGS):
            await chat.send(f"ping {n}")
        await anyio.sleep(3)  # bob answers each; his answers wait behind the flood
        answers = 0
        deadline = anyio.current_time() + 20
        with anyio.move_on_after(20):
            async for message in workload.messages():  # only now does the program read
                if message.sender.name == "bob":
                    answers += 1
                if answers == PINGS or anyio.current_time() > deadline:
                    break  # a queue the flood refills never waits, so never sees the scope
        return answers


def flood_spec(limits: MessageLimits) -> RunSpec:
    flooder = with_command(scripted(), "python", "-c", FLOODER)
    bob = scripted(ScriptedPolicy(rules=(Rule(match="^ping", texts=("pong {count}",)),)))
    return RunSpec.define(
        id="acme.flood/v1",
        agents={"flooder": flooder, "bob": bob},
        execute=execute,
        message_limits=limits,
    )


FAST = MessageLimits(messages_per_second=100_000, message_burst=100_000)
"""Limits a flood does not reach, so that only the fair share stands between it and bob."""


async def test_a_flood_past_the_rate_limit_takes_only_its_share_and_every_answer_arrives(
    artifact_root: Path,
) -> None:
    spec = flood_spec(FAST)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
    assert outcome.exit.value == PINGS  # before: the flood held the whole queue, bob's dropped
    ledger = verified(spec, outcome)
    dropped = list(ledger.events(LinkMessageDropped))
    assert {d.sender_id for d in dropped} == {"agent:flooder"}
    assert {d.reason for d in dropped} == {"sender-share"}


async def test_a_flood_is_refused_over_the_default_limits_and_the_refusals_are_recorded(
    artifact_root: Path,
) -> None:
    limits = MessageLimits()
    spec = flood_spec(limits)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
    assert outcome.exit.value == PINGS
    ledger = verified(spec, outcome)
    flood = [c for c in ledger.events(RouterMessageCommitted) if c.sender_id == "agent:flooder"]
    refused = list(ledger.events(RouterSendsRefused))
    assert refused and {r.sender_id for r in refused} == {"agent:flooder"}
    assert {r.reason for r in refused} == {"message-rate"}
    seconds = ledger.records[-1].envelope.elapsed_nanos / 1e9  # the whole run, from its start
    # committed: at most the burst plus the rate over the run; refused: far more, in few records
    assert len(flood) <= limits.message_burst + limits.messages_per_second * seconds
    assert sum(r.messages for r in refused) > len(flood)
    assert len(refused) <= seconds / 1.0 + 2  # one record a second at most
    assert not [d for d in ledger.events(LinkMessageDropped) if d.sender_id == "agent:bob"]
