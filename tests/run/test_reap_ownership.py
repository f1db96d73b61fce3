"""Reaping acts only on runs this artifact root's own run directory owns.

While a real run goes on under one root, its program plays the attacker: under a second root it
makes ``sr-<the live run's id>/sandboxes/`` (empty) and a controller record of a dead controller
of ours, then runs ``society status`` there, which reaps that root's dead runs. The live run's
agents must go on answering, and its cgroups must stay until its own teardown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from controller import Run, RunSpec
from controller.agents import scripted
from controller.platforms.local import LocalPlatform
from controller.platforms.local.reap import ProcessRecord
from controller.run import ProgramFinished, RunContext, Success
from society_sandbox.runtimes.scripted import Rule, ScriptedPolicy

pytestmark = pytest.mark.anyio

SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]
echo = ScriptedPolicy(rules=(Rule(match="^say ", texts=("{me} heard: {text}",)),))


def plant_decoy(other_root: Path, run_id: str) -> None:
    """The live run's id under another root: empty sandboxes, a dead controller's record."""
    decoy = other_root / run_id
    (decoy / "sandboxes").mkdir(parents=True)
    (decoy / "pids").mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    record = ProcessRecord.of(gone.pid, "controller")
    gone.wait()
    assert record is not None and not record.is_alive()
    (decoy / "pids" / "controller.json").write_bytes(record.to_json())


async def reply(ctx: RunContext, text: str) -> str:
    async with ctx.network.endpoint(f"host-{len(text)}") as host:
        conversation = await host.open(ctx.agents.alice.agent)
        await conversation.send(text)
        with anyio.fail_after(20):
            async for message in host.messages():
                return message.text
    raise AssertionError("no reply")


async def test_a_decoy_of_a_live_run_under_another_root_reaps_nothing_of_it(
    artifact_root: Path, tmp_path: Path
) -> None:
    other_root = tmp_path / "other-artifacts"
    other_root.mkdir()
    seen: dict[str, object] = {}

    async def execute(ctx: RunContext) -> None:
        seen["before"] = await reply(ctx, "say one")
        plant_decoy(other_root, ctx.ledger.run_id)
        env = {k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"}
        status = await anyio.run_process(
            [*SOCIETY, "status", "--artifacts", str(other_root), ctx.ledger.run_id],
            env=env,
            check=False,
        )
        seen["status"] = status.returncode, status.stdout.decode(), status.stderr.decode()
        seen["after"] = await reply(ctx, "say two")
        seen["ended"] = ctx.agents.alice.termination.done

    spec = RunSpec.define(id="acme.decoy/v1", agents={"alice": scripted(echo)}, execute=execute)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished), outcome
    assert isinstance(outcome.exit, Success), (outcome.exit, seen)
    assert seen["before"] == "alice heard: say one"
    assert seen["after"] == "alice heard: say two", seen["status"]
    assert seen["ended"] is False
    code, stdout, _ = seen["status"]  # type: ignore[misc]
    assert code == 0 and json.loads(stdout.splitlines()[-1])["runId"]
