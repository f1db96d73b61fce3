"""The keyless llm negotiation example, run end to end on the local model and graded offline."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from llm_support import verified

from controller.events.run import AgentRuntimeCompleted, AgentRuntimeFailed
from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Run, RunResult, Success, load_run_spec

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def grader() -> Any:
    path = EXAMPLES / "graders" / "llm_negotiation_grade.py"
    spec = importlib.util.spec_from_file_location("llm_negotiation_grade", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
async def test_the_llm_negotiation_example_runs_keyless_and_its_grader_reports_it(
    require_llama_cpp: None, artifact_root: Path
) -> None:
    spec = load_run_spec(EXAMPLES / "llm_negotiation.py")
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=artifact_root, seed=5)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    grading = grader()  # it decodes the ledger with its own catalog, as `society grade` does
    ledger = verified(grading.run_spec, outcome)
    report = grading.grade(ledger)

    assert all(report["spoke"][name] >= 1 for name in ("ada", "ben", "cy"))
    assert report["spoke"]["chair"] == 2
    assert report["partition"]["isolated"] == "cy"
    assert report["messagesDropped"] >= 1
    assert set(report["droppedByLink"]) <= {
        "agent:ada -> agent:cy",
        "agent:ben -> agent:cy",
        "agent:cy -> agent:ada",
        "agent:cy -> agent:ben",
    }
    usage = RunResult.from_outcome(outcome).usage
    assert usage is not None
    for name in ("ada", "ben", "cy"):
        graded, reported = report["usage"][name], usage["agents"][name]
        assert graded["calls"] == reported["calls"] >= 1
        assert graded["completionTokens"] == reported["completionTokens"]
        assert graded["costUsd"] == reported["costUsd"] == 0.0
    assert report["total"]["calls"] == usage["total"]["calls"]
    assert set(report["stopped"]) == {"ada", "ben", "cy"}
    # once every agent has stopped, the program records the positions without waiting out its
    # 30 s quiet timeout
    assert seconds_between_last_agent_end_and_positions(ledger) < 10.0


def seconds_between_last_agent_end_and_positions(ledger: Any) -> float:
    """How long the program went on after the last agent process ended, by the ledger's clock."""
    ended = [
        record.envelope.elapsed_nanos
        for record in ledger
        if isinstance(record.event, (AgentRuntimeCompleted, AgentRuntimeFailed))
    ]
    (positions,) = (r for r in ledger if r.event.tag == "acme.budget-positions/v1")
    return (positions.envelope.elapsed_nanos - max(ended)) / 1e9
