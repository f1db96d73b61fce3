"""What ``execute`` returns is kept: in the result line, in ``result.json`` and in the ledger's
``program-succeeded`` record, where a grader reads it; a value that cannot be kept gets a note
that says why, never silence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controller.events.run import ProgramSucceeded
from controller.run.outcomes import MAX_KEPT_VALUE_BYTES, keep_value
from ledger import open_ledger_artifacts
from ledger.grading import grade_ledger, load_module

SOCIETY = (sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())")

MODULE = """
from controller import RunSpec
from controller.agents import scripted


async def execute(ctx):
    return {RETURNED}


run_spec = RunSpec.define(
    id="tests.program-value/v1", agents={{"ann": scripted()}}, execute=execute
)
"""

GRADER = """
from controller import ProgramSucceeded, load_run_spec

catalog = load_run_spec(MODULE).catalog


def grade(ledger):
    [done] = list(ledger.events(ProgramSucceeded))
    return {"deals": done.value["deals"], "note": done.value_note}
"""


def _run(tmp_path: Path, returned: str) -> tuple[dict[str, Any], Path]:
    module = tmp_path / "value_module.py"
    module.write_text(MODULE.format(RETURNED=returned))
    done = subprocess.run(
        [*SOCIETY, "run", str(module), "--artifacts", str(tmp_path / "artifacts")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    return json.loads(line), module


def _succeeded(module: Path, line: dict[str, Any]) -> ProgramSucceeded:
    from controller.run.spec import load_run_spec

    ledger = open_ledger_artifacts(load_run_spec(module).catalog, Path(line["ledger"]))
    [event] = list(ledger.events(ProgramSucceeded))
    return event


def test_a_returned_dict_is_in_the_result_line_result_json_and_the_ledger(tmp_path: Path) -> None:
    returned = {"deals": 3, "prices": [9.5, 10], "winner": "ann", "tie": False, "note": None}
    line, module = _run(tmp_path, repr(returned))
    assert line["exit"] == "success"
    assert line["value"] == returned
    assert line["valueNote"] is None
    on_disk = json.loads((tmp_path / "artifacts" / line["runId"] / "result.json").read_text())
    assert on_disk["value"] == returned
    event = _succeeded(module, line)
    assert event.value == returned and event.value_note is None

    grader = tmp_path / "grader.py"
    grader.write_text(GRADER.replace("MODULE", repr(str(module))))
    graded = grade_ledger(load_module(grader), Path(line["ledger"]))
    assert graded == {"deals": 3, "note": None}


def test_a_tuple_is_kept_as_a_list_and_nothing_returned_is_no_value(tmp_path: Path) -> None:
    line, _ = _run(tmp_path, "('ann', 2)")
    assert line["value"] == ["ann", 2]
    line, module = _run(tmp_path, "None")
    assert line["value"] is None and line["valueNote"] is None
    assert _succeeded(module, line).value is None


def test_a_value_that_is_not_json_gets_a_typed_note_and_the_run_still_succeeds(
    tmp_path: Path,
) -> None:
    line, module = _run(tmp_path, "{'when': __import__('datetime').date(2026, 12, 7)}")
    assert line["exit"] == "success"
    assert line["value"] is None
    assert line["valueNote"].startswith("value-not-json: the program returned a dict (")
    event = _succeeded(module, line)
    assert event.value is None and event.value_note == line["valueNote"]


def test_a_value_over_the_cap_is_not_kept_and_says_how_large_it_was(tmp_path: Path) -> None:
    line, module = _run(tmp_path, f"'x' * {MAX_KEPT_VALUE_BYTES + 1}")
    assert line["value"] is None
    size = MAX_KEPT_VALUE_BYTES + 3  # the string and its two quotes
    assert line["valueNote"].startswith(f"value-too-large: the program's value is {size:,} bytes")
    assert _succeeded(module, line).value is None


@pytest.mark.parametrize(
    ("value", "note"),
    [
        (float("nan"), "value-not-json: the program returned the number nan"),
        ({1: "a"}, "value-not-json: the program returned a dict whose keys are not all strings"),
        ({"a": object()}, "value-not-json: the program returned a object"),
        ({"a": {1, 2}}, "value-not-json: the program returned a set"),
    ],
)
def test_values_json_cannot_hold_are_named(value: Any, note: str) -> None:
    kept, said = keep_value(value)
    assert kept is None and said is not None and said.startswith(note)


def test_json_data_is_kept_as_it_is() -> None:
    value = {"a": [1, 2.5, "x", True, None, {"b": []}]}
    assert keep_value(value) == (value, None)
