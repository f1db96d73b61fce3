"""The keyless NanoClaw negotiation example, run end to end on the local profile and graded
offline (about a minute here)."""

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
    path = EXAMPLES / "graders" / "nanoclaw_negotiation.py"
    spec = importlib.util.spec_from_file_location("nanoclaw_negotiation_grade", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
async def test_the_nanoclaw_negotiation_runs_keyless_and_its_grader_reports_it(
    require_nanoclaw: None, tmp_path: Path
) -> None:
    spec = load_run_spec(EXAMPLES / "nanoclaw_negotiation.py")
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
    assert report["spoke"]["market"] == 1
    assert all(1 <= report["spoke"][name] <= 2 for name in ("sam", "bea")), report
    assert report["nanoclaw"] == {"sam": "0.3.333", "bea": "0.3.333"}
    for name in ("sam", "bea"):
        assert report["usage"][name]["calls"] >= 1 and report["usage"][name]["promptTokens"] > 0
    assert report["positions"] is not None and set(report["positions"]) == {"sam", "bea"}
