"""Two llm agents on the fake provider (``LIFECYCLE_FAKE_PROVIDER_URL``); alice takes one turn,
then the program emits a tick every 50 ms until it is stopped."""

from __future__ import annotations

import os
from typing import ClassVar

import anyio

from controller import Event, EventCatalog, RunSpec
from controller.agents.llm import llm
from controller.modelgateway.config import ProviderConfig
from controller.run import RunContext
from society_sandbox.runtimes.llm import Budget

PROVIDER = ProviderConfig(
    name="acme",
    base_url=os.environ.get("LIFECYCLE_FAKE_PROVIDER_URL", "http://127.0.0.1:9/v1"),
    model="fake-model",
    api_key_name="ACME_LLM_API_KEY",
)


class Tick(Event):
    tag: ClassVar[str] = "lifecycle-test.llm-tick/v1"

    n: int


async def talk_then_tick(ctx: RunContext) -> None:
    await ctx.agents.alice.owner.instruct("Greet Bob.", peers=["bob"])
    with anyio.fail_after(60):
        await ctx.agents.alice.termination
    n = 0
    while True:
        await ctx.events.emit(Tick(n=n))
        n += 1
        await anyio.sleep(0.05)


run_spec = RunSpec.define(
    id="lifecycle-test.llm-endless/v1",
    events=[EventCatalog.make(Tick)],
    agents={
        name: llm("You are a terse test agent.", provider=PROVIDER, budget=Budget(max_turns=1))
        for name in ("alice", "bob")
    },
    execute=talk_then_tick,
)
