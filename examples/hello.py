"""Two scripted agents greet each other through the router (the README's quick start).

    society run examples/hello.py

A ``host`` endpoint opens a conversation with ann and ben and asks ann to greet ben. Ann's
policy answers the host once; ben's policy answers ann. The program returns what it heard.
"""

from __future__ import annotations

import anyio

from controller import Rule, RunContext, RunSpec, ScriptedPolicy, scripted

ann = ScriptedPolicy(
    rules=(Rule(match=r"@{me} please greet", senders=("host",), texts=("hello ben",), limit=1),)
)
ben = ScriptedPolicy(
    rules=(Rule(match=r"^hello {me}", senders=("ann",), texts=("hello ann, nice to meet you",)),)
)


async def greet(ctx: RunContext) -> list[str]:
    heard: list[str] = []
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(ctx.agents.ann.agent, ctx.agents.ben.agent)
        await conversation.send("@ann please greet @ben")
        with anyio.move_on_after(30.0):  # deadlines are the program's own
            async for message in host.messages():
                heard.append(f"{message.sender.name}: {message.text}")
                if message.sender.name == "ben":
                    break
    return heard


run_spec = RunSpec.define(
    id="acme.hello/v1",
    agents={"ann": scripted(ann), "ben": scripted(ben)},
    execute=greet,
)
