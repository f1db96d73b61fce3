"""Whole-run verification: a real local run's harvested files and logs, re-hashed against its
ledger by ``society ledger verify RUN_DIR`` and before ``society grade GRADER.py RUN_DIR``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_ledger_cli import society

from controller import Run
from controller.platforms.local import LocalPlatform
from controller.run import load_run_spec
from controller.run.outcomes import ProgramFinished
from ledger.format import RecordEnvelope
from ledger.run_artifacts import check_run_artifacts

SPEC_MODULE = """
from typing import ClassVar
from controller import Event, RunSpec
from controller.agents import scripted

class Noted(Event):
    tag: ClassVar[str] = "acme.noted/v1"
    text: str

async def execute(ctx):
    await ctx.events.emit(Noted(text="hello"))

run_spec = RunSpec.define(
    id="acme.whole-run/v1", events=[Noted], agents={"alice": scripted()}, execute=execute
)
"""
GRADER_MODULE = """
from spec import Noted, run_spec
catalog = run_spec.catalog

def grade(ledger):
    return {"noted": [event.text for event in ledger.events(Noted)]}
"""
OTHER_SPEC_GRADER = """
from controller import RunSpec
from controller.agents import scripted
from spec import Noted

async def execute(ctx):
    pass

run_spec = RunSpec.define(
    id="acme.other-experiment/v1", events=[Noted], agents={"a": scripted()}, execute=execute
)

def grade(ledger):
    return {"graded": True}
"""
NO_SPEC_GRADER = """
from controller import EventCatalog
from spec import Noted
catalog = EventCatalog.make(Noted)

def grade(ledger):
    return {"graded": True}
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real local run (a scripted agent, harvested policy file and log), done once."""
    folder = tmp_path_factory.mktemp("whole-run")
    (folder / "spec.py").write_text(SPEC_MODULE)
    (folder / "grader.py").write_text(GRADER_MODULE)
    (folder / "other_grader.py").write_text(OTHER_SPEC_GRADER)
    (folder / "no_spec_grader.py").write_text(NO_SPEC_GRADER)
    spec = load_run_spec(folder / "spec.py")
    outcome = anyio.run(
        lambda: Run.execute(spec, platform=LocalPlatform(), artifact_root=folder / "root")
    )
    assert isinstance(outcome, ProgramFinished), outcome
    (run_dir,) = (folder / "root").iterdir()
    return run_dir


@pytest.fixture
def run_dir(finished_run: Path, tmp_path: Path) -> Path:
    """A copy to tamper with, under ``<tmp>/root/``, with the modules beside it in ``<tmp>``."""
    copy = tmp_path / "root" / finished_run.name
    shutil.copytree(finished_run, copy, symlinks=True)
    for module in finished_run.parents[1].glob("*.py"):
        shutil.copy(module, tmp_path / module.name)
    return copy


def _verify(run_dir: Path, capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    code = society("ledger", "verify", str(run_dir), *argv)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return code, json.loads(lines[0])


def _harvested(run_dir: Path) -> list[Path]:
    return sorted(path for path in (run_dir / "artifacts").rglob("*") if path.is_file())


def test_verify_a_run_directory_re_hashes_every_harvested_file_and_log(
    run_dir: Path, capsys: Any
) -> None:
    code, line = _verify(run_dir, capsys, "--catalog", str(run_dir.parents[1] / "spec.py"))
    assert code == 0 and line["valid"] is True, line
    assert line["artifacts"] == {"checked": 2, "missing": 0, "changed": 0, "extra": 0}
    names = [path.relative_to(run_dir).as_posix() for path in _harvested(run_dir)]
    assert names == ["artifacts/alice/logs/output.log", "artifacts/alice/workspace/policy.json"]


def test_a_changed_artifact_is_reported_beside_a_ledger_that_verifies(
    run_dir: Path, capsys: Any
) -> None:
    target = _harvested(run_dir)[0]
    target.write_bytes(target.read_bytes() + b" ")
    code, line = _verify(run_dir, capsys)
    assert code == 1 and line["valid"] is False and line["reason"] == "artifact-changed"
    assert line["signature"] == "self" and line["unsignedRecords"] == 0  # the ledger is fine
    assert line["artifacts"]["changed"] == 1
    (problem,) = line["artifactProblems"]
    assert problem["path"] == target.relative_to(run_dir).as_posix()
    assert isinstance(problem["record"], int)


def test_a_missing_and_an_extra_artifact_are_each_reported(run_dir: Path, capsys: Any) -> None:
    first, _ = _harvested(run_dir)
    first.unlink()
    (run_dir / "artifacts" / "alice" / "planted.txt").write_text("not harvested")
    code, line = _verify(run_dir, capsys)
    assert code == 1 and line["reason"] == "artifact-missing"
    reasons = sorted(problem["reason"] for problem in line["artifactProblems"])
    assert reasons == ["artifact-extra", "artifact-missing"]
    assert line["artifacts"] == {"checked": 2, "missing": 1, "changed": 0, "extra": 1}


def test_a_symlink_in_place_of_an_artifact_is_not_accepted(run_dir: Path, capsys: Any) -> None:
    target = _harvested(run_dir)[0]
    original = run_dir.parent / "elsewhere"
    original.write_bytes(target.read_bytes())  # the same bytes, reached through a link
    target.unlink()
    os.symlink(original, target)
    code, line = _verify(run_dir, capsys)
    assert code == 1 and line["reason"] == "artifact-missing"


def test_a_claimed_path_outside_the_artifacts_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("x")
    row = {
        "runId": "sr-" + "1" * 32,
        "eventId": "sr-" + "1" * 32 + ":0",
        "logicalSequence": 0,
        "elapsedNanos": 0,
        "observedAt": "2025-01-31T12:00:00.123456Z",
        "producer": "kernel",
        "prevDigest": "0" * 64,
        "event": {"tag": "x.y/v1", "artifact": "artifacts/../secret", "sha256": "0" * 64},
    }
    check = check_run_artifacts(tmp_path, (RecordEnvelope.model_validate(row),))
    assert [problem.reason for problem in check.problems] == ["artifact-path-invalid"]


def test_grade_checks_the_run_directorys_artifacts_first(run_dir: Path, capsys: Any) -> None:
    grader = run_dir.parents[1] / "grader.py"
    assert society("grade", str(grader), str(run_dir)) == 0
    assert json.loads(capsys.readouterr().out) == {"noted": ["hello"]}
    target = _harvested(run_dir)[-1]
    target.write_bytes(b"rewritten after the run")
    assert society("grade", str(grader), str(run_dir)) == 1
    failure = json.loads(capsys.readouterr().out)
    assert failure["valid"] is False and failure["reason"] == "artifact-changed"


def test_grade_refuses_a_ledger_of_another_run_spec(run_dir: Path, capsys: Any) -> None:
    grader = run_dir.parents[1] / "other_grader.py"
    assert society("grade", str(grader), str(run_dir)) == 1
    failure = json.loads(capsys.readouterr().out)
    assert failure["reason"] == "definition-mismatch"
    assert "acme.other-experiment/v1" in failure["detail"]


def test_grade_says_when_the_grader_names_no_run_spec(run_dir: Path, capsys: Any) -> None:
    grader = run_dir.parents[1] / "no_spec_grader.py"
    assert society("grade", str(grader), str(run_dir)) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"graded": True}
    assert "names no `run_spec`" in captured.err and "not checked" in captured.err


def test_a_run_directory_with_several_ledgers_and_no_main_is_ambiguous(
    tmp_path: Path, capsys: Any
) -> None:
    for ref in ("first", "second"):
        (tmp_path / "ledger" / ref).mkdir(parents=True)
        (tmp_path / "ledger" / ref / "manifest.json").write_text("{}")
    code, line = _verify(tmp_path, capsys)
    assert code == 1 and line["reason"] == "run-ledger-ambiguous"
    assert "first, second" in line["detail"]
