"""Helpers for the kernel tests: verify a run's ledger, find its processes, break an agent."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controller.agents import ScriptedRuntime
from controller.platforms.local.reap import agent_record
from controller.run import ProgramFinished, RunSpec
from controller.run.outcomes import PlatformLost
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


def tags(ledger: LedgerArtifacts) -> list[str]:
    return [record.tag for record in ledger]


def processes_of(run_id: str) -> list[int]:
    """Live processes whose command line names the run (every agent's launcher does) or whose
    environment carries its mark (everything an agent starts, in any session, inherits it)."""
    found = []
    mark = f"SOCIETY_RUN_ID={run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (run_id.encode() in cmdline or mark in environment) and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def with_command(runtime: ScriptedRuntime, *command: str, **changes: Any) -> ScriptedRuntime:
    """The same runtime started with another entrypoint (to make an agent misbehave)."""
    return dataclasses.replace(runtime, command=command, **changes)


def agent_pid(artifact_root: Path, run_id: str, agent: str) -> int:
    body = json.loads((artifact_root / run_id / "pids" / agent_record(agent)).read_text())
    return int(body["pid"])


def program_environ(pid: int) -> bytes:
    """The environment of the agent's program: ``pid`` (the process the platform started) or,
    sandboxed, the descendant of it that runs inside the sandbox (bwrap and the launchers before
    it run with the controller's fixed environment)."""
    pending = [pid]
    while pending:
        current = pending.pop(0)
        environ = Path(f"/proc/{current}/environ").read_bytes()
        if b"SOCIETY_AGENT_NAME=" in environ:
            return environ
        for task in Path(f"/proc/{current}/task").iterdir():
            pending += [int(child) for child in (task / "children").read_text().split()]
    raise AssertionError(f"no process under {pid} runs the agent's program")


def ledger_bytes(outcome: ProgramFinished | PlatformLost) -> bytes:
    directory = Path(outcome.receipt.ledger_dir)
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()))


def only(items: Iterator[Any]) -> Any:
    found = list(items)
    assert len(found) == 1, found
    return found[0]
