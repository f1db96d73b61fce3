"""A program that says what its parameters tell it to, and returns them."""

from __future__ import annotations

import anyio
from pydantic import BaseModel, ConfigDict

from controller import Rule, RunContext, RunSpec, ScriptedPolicy, scripted

echo = ScriptedPolicy(rules=(Rule(match=r".", texts=("{me} heard {text}",)),))


class Greeting(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    word: str = "hello"
    times: int = 1


async def greet(ctx: RunContext) -> dict[str, object]:
    parameters: Greeting = ctx.parameters
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(ctx.agents.ann.agent)
        replies = host.messages()
        for _ in range(parameters.times):
            await conversation.send(parameters.word)
            with anyio.fail_after(30):
                async for _message in replies:
                    break
    return parameters.model_dump()


run_spec = RunSpec.define(
    id="acme.parameterized/v1",
    agents={"ann": scripted(echo)},
    execute=greet,
    parameters=Greeting,
)
