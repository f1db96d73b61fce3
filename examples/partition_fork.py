"""The negotiation, forked: from the fork point on, alice and bob no longer hear each other.

    society run examples/negotiation.py --artifacts artifacts           # the parent: they agree
    society run examples/partition_fork.py --fork artifacts/RUN_ID --at 4
    society grade examples/graders/partition_fork.py artifacts/FORK_RUN_ID
    society ledger compare artifacts/FORK_RUN_ID artifacts/RUN_ID   # "fork": {"holds": true}

Its ``run_spec`` is the negotiation's experiment (same id, roster and runtimes), so it forks a run
of ``examples/negotiation.py``. Run as a fork, it calls ``ctx.fork.reached()`` before its first
send; once the router has committed the fork point's messages it takes both links between alice
and bob down, so every message after the fork point reaches the workload endpoint but not the
other negotiator, and no deal is made. ``--set partition=false`` forks without the intervention
(the fork then agrees with its parent throughout); ``--set deadline_s=5`` shortens the wait.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
from negotiation import DEADLINE_S, negotiate
from negotiation import run_spec as negotiation
from pydantic import BaseModel, ConfigDict, Field

from controller import ForkPoint, RunContext, RunSpec


class PartitionAtFork(BaseModel):
    """The intervention's parameters (``society run --set KEY=VALUE``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: bool = True
    """Take the links between alice and bob down at the fork point."""
    deadline_s: float = Field(default=DEADLINE_S, gt=0)
    """How long the workload waits for a deal."""


async def negotiate_after_fork(ctx: RunContext) -> str | None:
    parameters: PartitionAtFork = ctx.parameters
    if ctx.fork is None or not parameters.partition:
        return await negotiate(ctx, deadline_s=parameters.deadline_s)
    point = ctx.fork.reached()  # before the first send: messages after the fork point wait
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(partition_at, ctx, point)
        deal = await negotiate(ctx, deadline_s=parameters.deadline_s)
        tasks.cancel_scope.cancel()
    return deal


async def partition_at(ctx: RunContext, point: ForkPoint) -> None:
    """Both links between alice and bob down from the fork point until the program ends."""
    alice, bob = ctx.agents.alice.agent, ctx.agents.bob.agent
    async with AsyncExitStack() as down:
        async with point:
            await down.enter_async_context(ctx.network.links.disable(alice, bob))
            await down.enter_async_context(ctx.network.links.disable(bob, alice))
        await anyio.sleep_forever()


run_spec = RunSpec.define(
    id=negotiation.id,
    events=[negotiation.events],
    agents=dict(negotiation.agents),
    execute=negotiate_after_fork,
    parameters=PartitionAtFork,
)
