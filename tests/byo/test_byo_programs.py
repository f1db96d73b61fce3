"""Programs of any language join a society: a Node program in stdio mode speaks through the
launcher; a program that never connects fails the readiness gate; a crash is evidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from controller import Run, RunContext, RunSpec, byo, scripted
from controller.agents import BYOOwner
from controller.events.network import RouterMessageCommitted
from controller.events.run import (
    AgentRuntimeCompleted,
    AgentRuntimeFailed,
    AgentRuntimeStartFailed,
)
from controller.platforms.local import LocalPlatform
from controller.run import PlatformLost, ProgramFinished, Success
from ledger import open_ledger_artifacts
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
NODE_AGENT = ROOT / "examples" / "byo" / "node_agent.mjs"


def ledger_of(spec: RunSpec, outcome: ProgramFinished | PlatformLost) -> Any:
    receipt = outcome.receipt
    return open_ledger_artifacts(
        spec.catalog,
        receipt.ledger_dir,
        expected_definition_id=spec.id,
        trusted_key=receipt.public_key,
    )


async def test_a_node_program_in_stdio_mode_speaks_answers_and_takes_instructions(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> dict[str, Any]:
        node = ctx.agents.owner("nod", BYOOwner)
        async with ctx.network.endpoint("workload") as workload:
            chat = await workload.open(ctx.agents.nod.agent)
            await chat.send("@nod ping")
            with anyio.fail_after(30):
                async for message in workload.messages():
                    reply = message.text
                    break
        await node.instruct("wave")
        with anyio.fail_after(30):
            while (state := await node.state())["sent"] < 3:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        return {"reply": reply, "state": state}

    spec = RunSpec.define(
        id="acme.byo-node/v1",
        agents={
            "nod": byo(
                ("node", "node_agent.mjs", "--ask", "bob"),
                mode="stdio",
                files={"node_agent.mjs": NODE_AGENT},
            ),
            "bob": scripted(
                ScriptedPolicy(rules=(Rule(match="^nod was told", texts=("@nod hi",)),))
            ),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    value = outcome.exit.value
    assert value["reply"] == "@bob nod (node) heard workload: nod ping"
    assert value["state"]["mode"] == "stdio" and value["state"]["refusedLines"] == 0
    ledger = ledger_of(spec, outcome)
    by_nod = [e.parts for e in ledger.events(RouterMessageCommitted) if e.sender_id == "agent:nod"]
    assert by_nod == [
        ["@bob nod (node) heard workload: nod ping"],
        ["nod was told: wave"],
        ["@bob nod (node) heard bob: nod hi"],
    ]
    assert "nod" in {e.agent for e in ledger.events(AgentRuntimeCompleted)}


async def test_a_program_that_never_connects_fails_the_readiness_gate_naming_the_agent(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> None:
        raise AssertionError("the gate should have failed")

    spec = RunSpec.define(
        id="acme.byo-silent/v1",
        agents={"mute": byo(("python", "-c", "import time; time.sleep(60)"), ready_timeout_s=3)},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert not isinstance(outcome, ProgramFinished), outcome
    failed = list(ledger_of(spec, outcome).events(AgentRuntimeStartFailed))
    assert [(f.agent, f.reason) for f in failed] == [("mute", "ready-timeout")]
    assert "router session not authenticated" in failed[0].detail


CRASHER = """
import sys
import anyio
from society_sandbox.network.client import connect_sandbox_agent


async def main() -> None:
    async with connect_sandbox_agent() as session:
        async for delivery in session.deliveries():
            await session.send(delivery.conversation_id, "about to fail")
            sys.exit(3)


anyio.run(main)
"""


async def test_a_program_that_crashes_after_dispatch_is_termination_evidence(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> str:
        async with ctx.network.endpoint("workload") as workload:
            chat = await workload.open(ctx.agents.crash.agent)
            await chat.send("go")
            with anyio.fail_after(30):
                async for message in workload.messages():
                    said = message.text
                    break
        with anyio.fail_after(30):
            await ctx.agents.crash.termination
        return said

    spec = RunSpec.define(
        id="acme.byo-crash/v1",
        agents={"crash": byo(("python", "crash.py"), files={"crash.py": CRASHER})},
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    ledger = ledger_of(spec, outcome)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert outcome.exit.value == "about to fail"
    failed = [e for e in ledger.events(AgentRuntimeFailed) if e.agent == "crash"]
    assert [(e.exit_code, e.phase, e.detail) for e in failed] == [
        (3, "program", "the program exited with 3")
    ]


UNRULY = r"""
import json, sys

def out(frame):
    print(json.dumps(frame) if isinstance(frame, dict) else frame, flush=True)

for line in sys.stdin:
    frame = json.loads(line)
    if frame["type"] == "hello":
        out("not json at all")
        out({"type": "shout", "text": "x"})
        out({"type": "send", "text": "nobody to send to", "id": "s0"})
        out({"type": "send", "to": ["no one"], "text": "x", "id": "s1"})
        out({"type": "open", "to": ["ghost"], "id": "o1"})
        out({"type": "send", "to": ["bob"], "text": "still here", "id": "s2"})
    elif frame["type"] in ("sent", "error"):
        print(json.dumps(frame), file=sys.stderr, flush=True)
    elif frame["type"] == "stop":
        break
"""


async def test_a_stdio_program_s_bad_lines_are_refused_one_by_one_and_it_keeps_speaking(
    artifact_root: Path,
) -> None:
    async def execute(ctx: RunContext) -> dict[str, Any]:
        owner = ctx.agents.owner("rude", BYOOwner)
        with anyio.fail_after(30):
            while (state := await owner.state())["sent"] < 1:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        return state

    spec = RunSpec.define(
        id="acme.byo-unruly/v1",
        agents={
            "rude": byo(("python", "rude.py"), mode="stdio", files={"rude.py": UNRULY}),
            "bob": scripted(),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    assert outcome.exit.value["sent"] == 1 and outcome.exit.value["refusedLines"] == 5
    ledger = ledger_of(spec, outcome)
    by_rude = [
        e.parts for e in ledger.events(RouterMessageCommitted) if e.sender_id == "agent:rude"
    ]
    assert by_rude == [["still here"]]
    log = (
        Path(outcome.receipt.ledger_dir).parents[1] / "artifacts/rude/logs/output.log"
    ).read_text()
    refusals = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert [(r.get("id"), r["reason"]) for r in refusals if r["type"] == "error"] == [
        (None, "malformed-frame"),
        (None, "malformed-frame"),
        ("s0", "bad-frame"),
        ("s1", "malformed-frame"),
        ("o1", "unknown-participant"),
    ]
    assert [r["id"] for r in refusals if r["type"] == "sent"] == ["s2"]
