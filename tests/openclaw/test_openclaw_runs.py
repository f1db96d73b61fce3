"""Whole local runs of OpenClaw agents: each in its own sandbox behind OpenClaw's own gateway RPC,
its social traffic through the router, its model calls through the run's model gateway.

One run serves the tests of this module (an OpenClaw gateway takes ~20-40 s and ~730 MB to start):
alice replies to the host through OpenClaw; bob's OpenClaw process is killed mid-run."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from openclaw_support import command_line, descendants

from controller import RunSpec
from controller.agents.openclaw import OpenClawAgentConfigured, openclaw
from controller.events.network import RouterMessageCommitted
from controller.events.run import (
    AgentProcessExited,
    AgentProcessSignaled,
    AgentRuntimeReady,
    AgentWorkspaceFileHarvested,
)
from controller.modelgateway.events import AgentModelUsage
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Run, RunContext, Success
from ledger import LedgerArtifacts, open_ledger_artifacts
from society_sandbox.runtimes.openclaw import TRANSCRIPT_DB
from society_sandbox.runtimes.openclaw_rpc import OpenClawRPC

pytestmark = pytest.mark.anyio


def _agent_pid(run_id: str, agent: str) -> int:
    for entry in Path("/proc").iterdir():
        argv = command_line(int(entry.name)).split(b"\0") if entry.name.isdigit() else []
        for i, arg in enumerate(argv[:-1]):
            if arg == run_id.encode() and argv[i + 1] == agent.encode():
                return int(entry.name)
    raise LookupError(f"no process of agent {agent} in run {run_id}")


async def _one_run(artifact_root: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def execute(ctx: RunContext) -> dict[str, Any]:
        alice, bob = ctx.agents.alice, ctx.agents.bob
        assert isinstance(alice.owner, OpenClawRPC)
        seen["methods"] = alice.owner.methods
        seen["health"] = await alice.owner.call("health", {})
        # bob crashes: every OpenClaw process of its sandbox is killed (adapter and gateway).
        gateways = [
            p
            for p in descendants(_agent_pid(ctx.ledger.run_id, "bob"))
            if b"openclaw" in command_line(p)
        ]
        seen["bob_node"] = gateways
        assert gateways, "bob's OpenClaw gateway process was not found"
        for pid in gateways:
            # A short-lived helper (or a child of one already killed) may be gone by now.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        seen["bob_end"] = type(await bob.termination).__name__
        async with ctx.network.endpoint("host") as host:
            chat = await host.open(alice.agent)
            await chat.send("Hello Alice. What price do you ask for your bike?")
            with anyio.fail_after(600):
                async for message in host.messages():
                    return {"reply": message.text, "from": message.sender.name}
        raise AssertionError("unreachable")

    spec = RunSpec.define(
        id="acme.openclaw-test/v1",
        agents={
            "alice": openclaw(
                "You are Alice. You sell a bike. Answer in one sentence.", max_turns=1
            ),
            "bob": openclaw("You are Bob.", max_turns=1),
        },
        execute=execute,
    )
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root, seed=3)
    return {"spec": spec, "outcome": outcome, "seen": seen}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, require_openclaw_module: None) -> Any:
    root = tmp_path_factory.mktemp("artifacts")
    return anyio.run(_one_run, root) | {"root": root}


def _ledger(run: dict[str, Any]) -> LedgerArtifacts:
    outcome = run["outcome"]
    assert isinstance(outcome, ProgramFinished), outcome
    return open_ledger_artifacts(
        run["spec"].catalog,
        outcome.receipt.ledger_dir,
        expected_definition_id=run["spec"].id,
        trusted_key=outcome.receipt.public_key,
    )


@pytest.mark.slow
def test_an_openclaw_agent_replies_through_the_router_and_the_model_gateway(
    finished_run: dict[str, Any],
) -> None:
    outcome, seen = finished_run["outcome"], finished_run["seen"]
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    ledger = _ledger(finished_run)
    ready = {e.agent: e for e in ledger.events(AgentRuntimeReady)}
    assert ready.keys() == {"alice", "bob"} and ready["alice"].runtime == "openclaw"
    assert {"agent", "agent.wait", "health"} <= set(seen["methods"])  # OpenClaw's own RPC
    configured = {e.agent: e for e in ledger.events(OpenClawAgentConfigured)}
    assert configured["alice"].server_version == "2026.9.6"
    assert configured["alice"].tools_deny == ["*"] and configured["alice"].exec_mode == "deny"

    reply = outcome.exit.value
    assert reply["from"] == "alice" and reply["reply"].strip()
    committed = [m for m in ledger.events(RouterMessageCommitted) if m.sender_id == "agent:alice"]
    assert [m.parts[0] for m in committed] == [reply["reply"]]
    usage = [u for u in ledger.events(AgentModelUsage) if u.agent == "alice"]
    assert usage and all((u.prompt_tokens or 0) > 500 for u in usage)


@pytest.mark.slow
def test_the_openclaw_transcript_is_harvested_and_verifies_by_digest(
    finished_run: dict[str, Any],
) -> None:
    ledger = _ledger(finished_run)
    [transcript] = [
        h
        for h in ledger.events(AgentWorkspaceFileHarvested)
        if h.agent == "alice" and h.path == TRANSCRIPT_DB
    ]
    assert transcript.outcome == "harvested", transcript
    assert transcript.artifact is not None and transcript.sha256 is not None
    copy = finished_run["root"] / ledger.run_id / transcript.artifact
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == transcript.sha256
    assert copy.read_bytes().startswith(b"SQLite format 3")


@pytest.mark.slow
def test_an_openclaw_agent_that_crashes_mid_run_is_evidence_and_the_program_goes_on(
    finished_run: dict[str, Any],
) -> None:
    seen = finished_run["seen"]
    assert seen["bob_node"], "bob's OpenClaw gateway process was not found"
    assert seen["bob_end"] in ("Exited", "Signaled")
    ledger = _ledger(finished_run)
    ended = [
        e
        for e in (*ledger.events(AgentProcessExited), *ledger.events(AgentProcessSignaled))
        if e.agent == "bob"
    ]
    assert ended and ended[0].phase == "program"
    assert isinstance(finished_run["outcome"].exit, Success)
