"""One llm agent on the local model at temperature 0 answers the host twice."""

from __future__ import annotations

import anyio

from controller import RunContext, RunSpec, llm
from controller.agents.llm import Budget, ReplyPolicy

QUESTIONS = ("Name one fruit.", "Name one colour.")


async def ask(ctx: RunContext) -> list[str]:
    answers: list[str] = []
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(ctx.agents.lea.agent)
        replies = host.messages()
        for question in QUESTIONS:
            await conversation.send(question)
            with anyio.fail_after(120):
                async for message in replies:
                    answers.append(message.text)
                    break
    return answers


run_spec = RunSpec.define(
    id="acme.llm-zero/v1",
    agents={
        "lea": llm(
            "You are Lea. You answer in one word.",
            budget=Budget(max_turns=2, max_wall_s=200),
            reply=ReplyPolicy(max_reply_tokens=12, temperature=0.0),
        )
    },
    execute=ask,
)
