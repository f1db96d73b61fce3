"""A society whose program draws from the operating system, not the run's seed: no replay of it
can be identical."""

from __future__ import annotations

import secrets

import anyio

from controller import Rule, RunContext, RunSpec, ScriptedPolicy, scripted

echo = ScriptedPolicy(rules=(Rule(match=r"^draw ", texts=("{me} got {text}",)),))


async def draw(ctx: RunContext) -> str:
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(ctx.agents.ann.agent)
        await conversation.send(f"draw {secrets.token_hex(8)}")
        with anyio.fail_after(30):
            async for message in host.messages():
                return message.text
    return ""


run_spec = RunSpec.define(id="acme.unseeded/v1", agents={"ann": scripted(echo)}, execute=draw)
