"""The keyless OpenClaw negotiation example, run end to end and graded offline.

About 3 minutes of CI (142-165 s a run here). It came back once the local model served one call
at a time from the gateway's queue (concurrent first turns had timed out on the server) and got
OpenClaw's reply limit in the field it reads (replies had run until the context was full)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from controller.platforms.local import LocalPlatform
from controller.run import ProgramFinished, Run, Success, load_run_spec
from ledger import open_ledger_artifacts

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def grader() -> Any:
    path = EXAMPLES / "graders" / "openclaw_negotiation.py"
    spec = importlib.util.spec_from_file_location("openclaw_negotiation_grade", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
async def test_the_openclaw_negotiation_runs_keyless_and_its_grader_reports_it(
    require_openclaw_module: None, tmp_path: Path
) -> None:
    spec = load_run_spec(EXAMPLES / "openclaw_negotiation.py")
    outcome = await Run.execute(spec, platform=LocalPlatform(), artifact_root=tmp_path, seed=7)
    assert isinstance(outcome, ProgramFinished) and isinstance(outcome.exit, Success), outcome
    grading = grader()
    report = grading.grade(
        open_ledger_artifacts(
            grading.run_spec.catalog,
            outcome.receipt.ledger_dir,
            expected_definition_id=spec.id,
            trusted_key=outcome.receipt.public_key,
        )
    )
    assert all(report["spoke"][name] >= 1 for name in ("sam", "bea")), report
    assert report["spoke"]["market"] == 2
    assert report["partitionMessages"] is not None
    assert set(report["droppedByLink"]) <= {"agent:sam -> agent:bea", "agent:bea -> agent:sam"}
    assert report["openclaw"] == {"sam": "2026.9.6", "bea": "2026.9.6"}
    assert set(report["transcripts"]) == {"sam", "bea"}
    for name in ("sam", "bea"):
        assert report["usage"][name]["calls"] >= 1
