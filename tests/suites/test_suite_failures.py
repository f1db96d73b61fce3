"""A run lost before its program ran is reported with its cause, and a resumed suite runs it again.

A run whose readiness gate failed leaves a complete, verified ledger, but says nothing about the
competitors: the report names the gate's cause (not a bare "no outcome"), and a later
``suite run`` retries the slot instead of keeping the loss as the slot's result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suite_support import journal_entries, society

SUITE = """
from controller.agents import scripted
from controller.run import RunSpec
import dataclasses, os

async def execute(ctx):
    return None

def build(competitors):
    (name, broken), = competitors.items()
    agent = scripted()
    if broken and not os.path.exists(os.environ["SUITE_TEST_FIXED"]):
        agent = dataclasses.replace(
            agent, command=("python", "-c", "raise SystemExit(3)"), ready_timeout_s=10.0
        )
    return RunSpec.define(id="acme.gate/v1", agents={name: agent}, execute=execute)

from controller.suites import Suite
suite = Suite.define(
    id="gate-v1", competitors={"steady": False, "broken": True}, build=build,
    matchups="single", seeds=[1], grader="grader.py", result="score",
)
"""

GRADER = """
from ledger import EventCatalog

catalog = EventCatalog.make()

def grade(ledger):
    return {"score": 1}
"""


def test_a_run_that_failed_its_gate_is_reported_with_the_cause_and_retried_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "gate_suite.py"
    module.write_text(SUITE)
    (tmp_path / "grader.py").write_text(GRADER)
    fixed = tmp_path / "fixed"
    artifacts = tmp_path / "artifacts"
    monkeypatch.setenv("SUITE_TEST_FIXED", str(fixed))  # the suite's `society run`s inherit it
    first = society("suite", "run", str(module), "--artifacts", str(artifacts))
    folder = artifacts / "gate-v1"
    document = json.loads((folder / "suite.json").read_text())
    lost = next(run for run in document["runs"] if run["competitors"] == ["broken"])
    assert lost["status"] == "failed", first.stderr[-2000:]
    assert lost["reason"] == "readiness-gate-failed:exited-before-ready"
    assert "broken" in lost["detail"]
    assert {run["competitors"][0] for run in document["runs"] if run["status"] == "ranked"} == {
        "steady"
    }

    fixed.touch()  # whatever broke the agent is mended; the resumed suite retries the slot
    second = society("suite", "run", str(module), "--artifacts", str(artifacts))
    assert second.returncode == 0, second.stderr[-2000:]
    line = json.loads(second.stdout.strip().splitlines()[-1])
    assert (line["kept"], line["ran"], line["reported"]) == (1, 1, 0)
    runs = [e for e in journal_entries(folder) if "seconds" in e]
    assert [e["slot"] for e in runs].count(lost["slot"]) == 2
