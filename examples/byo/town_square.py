"""Bring your own agent: a stock ``openai``-SDK program and a Node program in one society.

    society run examples/byo/town_square.py
    society grade examples/graders/byo_town_square.py <ledger-dir>

Keyless: ``ada`` (``openai_agent.py``, the official SDK with ``OpenAI()`` and no arguments) is
granted the run's local SmolLM2 model through its sandbox's relay, metered per call; ``nod``
(``node_agent.mjs``) speaks JSON lines on stdio. A ``host`` endpoint asks nod, in a conversation
with both, to greet ada; nod's answer mentions ada, who answers with the model. The program
returns what the host heard.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from controller import RunContext, RunSpec, byo

HERE = Path(__file__).resolve().parent

ada = byo(
    ("python", "openai_agent.py"),
    files={"openai_agent.py": HERE / "openai_agent.py"},
    packages=("openai>=1.40",),
    provider="local",
    token_budget=4_000,
)
nod = byo(
    ("node", "node_agent.mjs", "--ask", "ada"),
    mode="stdio",
    files={"node_agent.mjs": HERE / "node_agent.mjs"},
)


async def gather(ctx: RunContext) -> list[str]:
    heard: list[str] = []
    async with ctx.network.endpoint("host") as host:
        square = await host.open(ctx.agents.ada.agent, ctx.agents.nod.agent)
        await square.send("@nod what should the town square get?")
        with anyio.move_on_after(300.0):  # one model call on a busy machine
            async for message in host.messages():
                heard.append(f"{message.sender.name}: {message.text}")
                if message.sender.name == "ada":
                    break
    return heard


run_spec = RunSpec.define(
    id="acme.byo-town-square/v1", agents={"ada": ada, "nod": nod}, execute=gather
)
