"""Two silent scripted agents; the program returns once ``$GATE/go`` exists. Cancelled, it holds
its finalization until ``$GATE/release`` exists, so a test can look at a run that is finalizing."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from controller import RunSpec
from controller.agents import scripted
from controller.run import RunContext


async def wait_for_gate(ctx: RunContext) -> str:
    gate = Path(os.environ["GATE"])
    try:
        await until_one_of(gate / "go")
    finally:
        with anyio.CancelScope(shield=True):
            (gate / "holding").touch()
            await until_one_of(gate / "go", gate / "release")
    return "through the gate"


async def until_one_of(*files: Path) -> None:
    while True:
        if any(file.exists() for file in files):
            return
        await anyio.sleep(0.05)


run_spec = RunSpec.define(
    id="lifecycle-test.gated/v1",
    agents={"alice": scripted(), "bob": scripted()},
    execute=wait_for_gate,
)
