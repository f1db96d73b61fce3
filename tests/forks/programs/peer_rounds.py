"""A peer society: eve (an evaluation peer, the tally policy) and bob (scripted) answer the host's
rounds in turn, one speaker at a time."""

from __future__ import annotations

from pathlib import Path

import anyio

from controller import Rule, RunContext, RunSpec, ScriptedPolicy, peer, scripted

TALLY = Path(__file__).resolve().parents[3] / "examples" / "peers" / "tally.py"
ROUNDS = 3

echo = ScriptedPolicy(rules=(Rule(match=r"^round \d+$", texts=("{me} heard {text}",)),))


async def rounds(ctx: RunContext) -> list[str]:
    heard: list[str] = []
    async with ctx.network.endpoint("host") as host:
        replies = host.messages()
        for name in ("eve", "bob"):
            conversation = await host.open(ctx.agents[name].agent)
            for number in range(1, ROUNDS + 1):
                await conversation.send(f"round {number}")
                with anyio.fail_after(30):
                    async for message in replies:
                        heard.append(f"{message.sender.name}: {message.text}")
                        break
    return heard


run_spec = RunSpec.define(
    id="acme.peer-rounds/v1",
    agents={"eve": peer("tally.py", "respond", files={"tally.py": TALLY}), "bob": scripted(echo)},
    execute=rounds,
)
