"""Plain replicates of one experiment: ``matchups="replicates"`` runs it once per seed, ranks
nothing, and ``suite.json`` summarizes each numeric field of the grader's output over the seeds;
``suite verify`` recomputes the summary byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from suite_support import ROOT, society

from controller.suites import Suite, SuiteError

SUITE = """
from pathlib import Path

from controller import Suite, load_run_spec

experiment = load_run_spec(Path(__file__).parent / "negotiation.py")

suite = Suite.define(
    id="negotiation-replicates",
    build=lambda _competitors: experiment,
    matchups="replicates",
    seeds=range(1, 4),
    grader="graders/negotiation.py",
)
"""


def test_replicates_run_once_per_seed_and_summarize_every_numeric_field(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "graders").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "negotiation.py", project)
    shutil.copy(ROOT / "examples" / "graders" / "negotiation.py", project / "graders")
    (project / "replicates.py").write_text(SUITE)
    artifacts = tmp_path / "artifacts"
    ran = society("suite", "run", str(project / "replicates.py"), "--artifacts", str(artifacts))
    assert ran.returncode == 0, ran.stderr[-3000:]
    folder = artifacts / "negotiation-replicates"
    document = json.loads((folder / "suite.json").read_text())
    assert document["matchups"] == "replicates" and document["competitors"] == ["replicate"]
    assert [run["seed"] for run in document["runs"]] == [1, 2, 3]
    assert all(run["status"] == "ranked" for run in document["runs"])
    assert document["rankings"] == []
    summary = {row["field"]: row for row in document["summary"]}
    assert set(summary) == {"agreed", "proposals", "programSucceeded"}  # numbers and booleans
    proposals = [run["result"]["proposals"] for run in document["runs"]]
    assert summary["proposals"]["mean"] == pytest.approx(sum(proposals) / 3, abs=1e-3)
    low, high = summary["proposals"]["interval"]
    assert low <= summary["proposals"]["mean"] <= high
    assert summary["agreed"]["mean"] == 1.0 and summary["agreed"]["runs"] == 3
    board = (folder / "leaderboard.md").read_text()
    assert "Replicates, not ranked" in board and "| replicate | proposals |" in board

    verified = society(
        "suite", "verify", str(folder), "--suite", str(project / "replicates.py")
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
    (folder / "suite.json").write_text(
        json.dumps({**document, "summary": [{**document["summary"][0], "mean": 99.0}]}, indent=2)
    )
    caught = society("suite", "verify", str(folder), "--suite", str(project / "replicates.py"))
    assert caught.returncode != 0 and "summary" in caught.stdout + caught.stderr


def test_a_replicates_suite_takes_no_ranking_and_other_modes_still_need_a_result() -> None:
    with pytest.raises(SuiteError) as refused:
        Suite.define(
            id="x", build=lambda _: None, matchups="replicates", seeds=[1], grader="g.py",
            ranking="score",
        )  # fmt: skip
    assert refused.value.reason == "bad-ranking"
    with pytest.raises(SuiteError) as missing:
        Suite.define(
            id="x", competitors={"a": 1}, build=lambda _: None, matchups="single", seeds=[1],
            grader="g.py",
        )  # fmt: skip
    assert missing.value.reason == "bad-result-field"
