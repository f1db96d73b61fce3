"""Helpers for the llm runtime tests: verified ledgers, agent processes, usage sums."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from controller.modelgateway.events import AgentModelUsage
from controller.run import PlatformLost, ProgramFinished, RunSpec
from ledger import LedgerArtifacts, open_ledger_artifacts


def verified(spec: RunSpec, outcome: ProgramFinished | PlatformLost) -> LedgerArtifacts:
    """The run's ledger, verified offline against the key its receipt carries."""
    receipt = outcome.receipt
    assert receipt.complete
    return open_ledger_artifacts(
        spec.catalog,
        receipt.ledger_dir,
        expected_definition_id=spec.id,
        trusted_key=receipt.public_key,
    )


def usage_from_events(ledger: LedgerArtifacts) -> dict[str, dict[str, Any]]:
    """Calls and tokens per agent, summed from the gateway's ``AgentModelUsage`` events."""
    sums: dict[str, dict[str, Any]] = {}
    for call in ledger.events(AgentModelUsage):
        tally = sums.setdefault(
            call.agent, {"calls": 0, "promptTokens": 0, "completionTokens": 0, "costUsd": 0.0}
        )
        tally["calls"] += 1
        tally["promptTokens"] += call.prompt_tokens
        tally["completionTokens"] += call.completion_tokens
        tally["costUsd"] = None if call.cost_usd is None else tally["costUsd"] + call.cost_usd
    return sums


def agent_pid(run_id: str, agent: str) -> int:
    """The live process whose command line names the run, then the agent (its launcher's)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == run_id.encode() and argv[i + 1] == agent.encode():
                return int(entry.name)
    raise LookupError(f"no process of agent {agent} in run {run_id}")


def environment_of(pid: int) -> bytes:
    """The agent program's environment: ``pid`` (the process the platform started) or,
    sandboxed, its descendant inside the sandbox (bwrap and the launchers before it run with the
    controller's fixed environment)."""
    pending = [pid]
    while pending:
        current = pending.pop(0)
        environ = (Path("/proc") / str(current) / "environ").read_bytes()
        if b"SOCIETY_AGENT_NAME=" in environ:
            return environ
        for task in (Path("/proc") / str(current) / "task").iterdir():
            pending += [int(child) for child in (task / "children").read_text().split()]
    raise AssertionError(f"no process under {pid} runs the agent's program")


def every_file(directory: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def model_servers_of_this_process() -> list[int]:
    """Live llama.cpp servers (one-slot or parallel) this test process started
    (``LocalModelServer`` children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, parent = stat[0], int(stat[1])
        server = b"import xllamacpp" in cmdline
        if server and parent == os.getpid() and state not in "ZX":
            found.append(int(entry.name))
    return found
