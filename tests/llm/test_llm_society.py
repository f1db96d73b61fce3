"""The llm society example as a small town, run keyless on the parallel local model and graded."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from llm_support import verified

from controller.modelgateway.events import ModelGatewayStarted
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Run, RunResult, Success

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESIDENTS = 8
TURNS = 2


def load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
async def test_a_town_of_eight_llm_agents_spends_every_turn_and_its_grader_sums_the_gateways_usage(
    require_llama_cpp: None, artifact_root: Path
) -> None:
    society = load(EXAMPLES / "llm_society.py", "llm_society")
    spec = society.society_spec(RESIDENTS, TURNS)
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root, seed=3)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    grading = load(EXAMPLES / "graders" / "llm_society_grade.py", "llm_society_grade")
    ledger = verified(grading.run_spec, outcome)
    report = grading.grade(ledger)

    assert report["residents"] == RESIDENTS and report["tables"] == 2
    assert report["callsPerResident"] == {TURNS: RESIDENTS}, report["usage"]
    assert report["stopped"] == {"turn-budget": RESIDENTS}
    assert report["failedCalls"] == 0 and report["spoke"] >= 1
    assert report["hallMessages"] == 2 + report["nudges"]
    assert report["tally"] is not None and set(report["tally"]) == {"fountain", "garden", "market"}
    usage = RunResult.from_outcome(outcome).usage
    assert usage is not None
    for name, graded in report["usage"].items():
        reported = usage["agents"][name]
        assert graded["calls"] == reported["calls"] == TURNS
        assert graded["promptTokens"] == reported["promptTokens"]
        assert graded["completionTokens"] == reported["completionTokens"]
    assert report["completionTokens"] == usage["total"]["completionTokens"]
    [started] = ledger.events(ModelGatewayStarted)
    assert len(started.agents) == RESIDENTS
    log = (artifact_root / ledger.run_id / "model-server.log").read_text()
    assert f"n_slots = {RESIDENTS}" in log  # a slot per resident on this machine
