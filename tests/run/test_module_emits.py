"""An event the program emits must be declared: a module in its own process learns which one it
named and how to declare it, when the spec is defined where the code shows it, else mid-run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SOCIETY = (sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())")

MODULE = """
from typing import ClassVar

from controller import Event, RunSpec, scripted


class Noted(Event):
    tag: ClassVar[str] = "acme.noted/v1"

    text: str


LATER = {"noted": Noted}


async def execute(ctx):
    await ctx.events.emit(EMIT)


run_spec = RunSpec.define(id="acme.emits/v1", agents={"ann": scripted()}, execute=execute)
"""


def _society_run(tmp_path: Path, emit: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "emits.py"
    module.write_text(MODULE.replace("EMIT", emit))
    return subprocess.run(
        [*SOCIETY, "run", str(module), "--artifacts", str(tmp_path / "artifacts")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_module_naming_an_undeclared_event_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    done = _society_run(tmp_path, 'Noted(text="hi")')
    assert done.returncode == 2 and done.stdout == ""
    assert "execute names Noted (acme.noted/v1), an event class this RunSpec" in done.stderr
    assert "next step: list it in RunSpec.define(events=[..., Noted])" in done.stderr
    assert not (tmp_path / "artifacts").exists()


def test_an_undeclared_event_reached_only_at_run_time_fails_the_program_naming_the_fix(
    tmp_path: Path,
) -> None:
    done = _society_run(tmp_path, 'LATER["noted"](text="hi")')
    assert done.returncode == 1
    line = json.loads(done.stdout)
    assert line["outcome"] == "ProgramFinished" and line["exit"] == "failure"
    assert (
        "the program's event 'acme.noted/v1' is not one of this RunSpec's event classes; "
        "list its class in RunSpec.define(events=[...])"
    ) in done.stderr
