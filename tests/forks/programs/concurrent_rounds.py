"""Two agents answering at once: each round the host asks alice (conversation 1) and bob
(conversation 2) at the same time, and both reply at once (no delay), so the two questions' and
the two answers' commits race; the host waits for both answers before the next round."""

from __future__ import annotations

import anyio

from controller import ReplyDelay, Rule, RunContext, RunSpec, ScriptedPolicy, scripted

ROUNDS = 6

echo = ScriptedPolicy(
    rules=(Rule(match=r"^round \d+$", texts=("{me} heard {text}",)),),
    delay=ReplyDelay(min_ms=0, max_ms=0),
)


async def rounds(ctx: RunContext) -> list[str]:
    heard: list[str] = []
    async with ctx.network.endpoint("host") as host:
        replies = host.messages()
        alice = await host.open(ctx.agents.alice.agent)
        bob = await host.open(ctx.agents.bob.agent)
        for number in range(1, ROUNDS + 1):
            async with anyio.create_task_group() as asking:
                asking.start_soon(alice.send, f"round {number}")
                asking.start_soon(bob.send, f"round {number}")
            with anyio.fail_after(30):
                for _ in range(2):
                    message = await anext(replies)
                    heard.append(message.text)
    return sorted(heard)  # the order the two replies arrived in is the race, not the outcome


run_spec = RunSpec.define(
    id="acme.concurrent-rounds/v1",
    agents={"alice": scripted(echo), "bob": scripted(echo)},
    execute=rounds,
)
