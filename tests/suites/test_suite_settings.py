"""Suite competitors as RunSpec parameters: each run of the suite is started with its
competitors' ``--set`` values, its ledger records them, and the rankings follow from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suite_support import society

SUITE = """
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from controller import Event, RunSpec, scripted
from controller.suites import Suite


class Moves(Event):
    tag: ClassVar[str] = "acme.pd-set-moves/v1"
    moves: dict[str, str]


class Setting(BaseModel):
    model_config = ConfigDict(extra="forbid")
    moves: dict[str, str] = {}


async def play(ctx):
    await ctx.events.emit(Moves(moves=dict(ctx.parameters.moves)))


def build(competitors):
    return RunSpec.define(
        id="acme.pd-set/v1", events=[Moves], agents={seat: scripted() for seat in competitors},
        execute=play, parameters=Setting,
    )


suite = Suite.define(
    id="pd-set-v1", competitors={"dove": "C", "hawk": "D"}, build=build,
    settings=lambda competitors: {SETTING},
    matchups="round-robin", ranking="score", seeds=[1], grader="pd_set_grader.py", result="payoff",
)
"""
GRADER = """
from pd_set_suite import Moves, build

catalog = build({"a": "C", "b": "D"}).catalog
definition_id = "acme.pd-set/v1"
PAYOFF = {("C", "C"): (3, 3), ("C", "D"): (0, 5), ("D", "C"): (5, 0), ("D", "D"): (1, 1)}


def grade(ledger):
    (event,) = ledger.events(Moves)
    (first, a), (second, b) = event.moves.items()
    mine, theirs = PAYOFF[(a, b)]
    return {"payoff": {first: mine, second: theirs}}
"""


def _suite(here: Path, setting: str) -> Path:
    (here / "pd_set_suite.py").write_text(SUITE.replace("{SETTING}", setting))
    (here / "pd_set_grader.py").write_text(GRADER)
    return here / "pd_set_suite.py"


@pytest.mark.slow
def test_each_run_is_started_with_its_competitors_settings_and_its_ledger_records_them(
    tmp_path: Path,
) -> None:
    module = _suite(tmp_path, '{"moves": dict(competitors)}')
    done = society("suite", "run", str(module), "--artifacts", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "runs" / "pd-set-v1"
    document = json.loads((folder / "suite.json").read_text())
    [run] = document["runs"]
    # The moves came only from the settings: the program emits what ctx.parameters holds.
    assert run["result"] == {"payoff": {"dove": 0, "hawk": 5}}
    [started] = [
        json.loads(line)
        for path in (folder / "runs").glob("*/ledger/main/records.ndjson")
        for line in path.read_text().splitlines()
        if '"society.run-started/v1"' in line
    ]
    assert started["event"]["parameters"] == {"moves": {"dove": "C", "hawk": "D"}}, started
    verified = society("suite", "verify", str(folder), "--suite", str(module))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["ranked"] == 1


def test_settings_the_run_spec_does_not_declare_are_refused_before_any_run(
    tmp_path: Path,
) -> None:
    module = _suite(tmp_path, '{"patience": 3}')
    done = society("suite", "run", str(module), "--artifacts", str(tmp_path / "runs"))
    assert done.returncode != 0
    assert "bad-settings" in done.stdout + done.stderr, done.stdout + done.stderr
    assert not list((tmp_path / "runs").glob("pd-set-v1/runs/*")), "a run started"
