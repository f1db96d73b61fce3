"""An agent's working directory is hostile data: what it leaves there breaks no harvest or cleanup.

The vandal is a real sandboxed agent: before it becomes an ordinary scripted agent it nests 3,000
directories (deeper than Python's recursion limit and than PATH_MAX as one path), locks one of
them, and turns a declared file into a symbolic-link loop. The run's program succeeds, so the
outcome must stay ``ProgramFinished``, every other item of every agent is harvested, the loop is
that one item's outcome, the sandboxes are gone, and a later start's reaping finds nothing left.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_support import verified, with_command

from controller import Run, RunSpec
from controller.agents import Harvest, scripted
from controller.events.run import AgentWorkspaceFileHarvested
from controller.platforms.local import LocalPlatform, reap_stale_runs
from controller.run import ProgramFinished, RunContext, Success

pytestmark = pytest.mark.anyio

VANDAL = """\
import os, runpy, sys
os.symlink("loop-b", "loop-a")
os.symlink("loop-a", "loop-b")
home = os.open(".", os.O_RDONLY)
for depth in range(3000):
    os.mkdir("d")
    os.chdir("d")
    if depth == 1500:
        os.mkdir("locked")
        open("locked/inside", "w").close()
        os.chmod("locked", 0)
os.fchdir(home)
sys.argv = ["agent_images.scripted"]
runpy.run_module("agent_images.scripted", run_name="__main__", alter_sys=True)
"""


async def execute(ctx: RunContext) -> str:
    return "done"


def hostile_spec() -> RunSpec:
    harvest = Harvest(files=("loop-a", "notes.txt"))
    vandal = with_command(
        scripted(files={"notes.txt": "the vandal's notes"}, harvest=harvest),
        "python",
        "-c",
        VANDAL,
    )
    bystander = scripted(files={"notes.txt": "the bystander's notes"}, harvest=harvest)
    return RunSpec.define(
        id="acme.vandal/v1", agents={"vandal": vandal, "bob": bystander}, execute=execute
    )


async def test_a_nested_tree_and_a_link_loop_break_neither_harvest_nor_cleanup(
    artifact_root: Path,
) -> None:
    spec = hostile_spec()
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success)
    ledger = verified(spec, outcome)
    harvested = {(e.agent, e.path): e for e in ledger.events(AgentWorkspaceFileHarvested)}
    assert {key: e.outcome for key, e in harvested.items()} == {
        ("vandal", "loop-a"): "unreadable",
        ("vandal", "notes.txt"): "harvested",
        ("bob", "loop-a"): "absent",
        ("bob", "notes.txt"): "harvested",
    }
    assert harvested[("vandal", "loop-a")].detail == (
        "a symbolic link on the path (harvest follows none)"
    )
    run_dir = artifact_root / ledger.run_id
    assert not (run_dir / "sandboxes").exists()  # the 3,000 levels are gone
    assert reap_stale_runs(artifact_root) == []  # what every later `society` start does
