"""A small single suite: each of two echoing competitors answers the host's words once; the
score is the number of words it answered."""

from __future__ import annotations

from collections.abc import Mapping

import anyio

from controller import Rule, RunContext, RunSpec, ScriptedPolicy, scripted
from controller.suites import Suite


async def ask(ctx: RunContext) -> int:
    [handle] = ctx.agents.values()
    answered = 0
    async with ctx.network.endpoint("host") as host:
        conversation = await host.open(handle.agent)
        replies = host.messages()
        for word in ("one", "two"):
            await conversation.send(word)
            with anyio.fail_after(30):
                async for _message in replies:
                    answered += 1
                    break
    return answered


def build(competitors: Mapping[str, str]) -> RunSpec:
    [(name, reply)] = competitors.items()
    policy = ScriptedPolicy(rules=(Rule(match=r".", texts=(reply,)),))
    return RunSpec.define(id="acme.echo-suite/v1", agents={name: scripted(policy)}, execute=ask)


suite = Suite.define(
    id="echo-v1",
    competitors={"ann": "ann says {text}", "ben": "ben says {text}"},
    build=build,
    matchups="single",
    seeds=range(1, 2),
    grader="echo_suite_grade.py",
    result="score",
)
