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
from deep_tree import make_deep_tree, remove_deep_tree
from ledger_testkit import write_ledger
from test_ledger_cli import society
from test_ledger_export_cli import BUCKET, gcs  # noqa: F401 (fixture)

from controller import Run
from controller.platforms.local import LocalPlatform
from controller.run import load_run_spec
from controller.run.outcomes import ProgramFinished
from ledger import SigningKey
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


def _verify(run_dir: Path | str, capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
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


def _society_main(*argv: str | Path) -> int:
    from controller.cli import main

    return main([str(arg) for arg in argv])


def _timeline(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.lstrip().startswith("+")]


def _beside_another_ledger(run_dir: Path) -> Path:
    """``run_dir`` with a second, unrelated ledger under ``ledger/aaa`` (sorted before ``main``);
    returns the run's own ledger directory, ``ledger/main``."""
    write_ledger(run_dir / "ledger" / "aaa", 4, key=SigningKey.generate())
    return run_dir / "ledger" / "main"


def test_show_reads_a_run_directory_as_its_main_ledger_and_re_hashes_its_artifacts(
    run_dir: Path, capsys: Any
) -> None:
    ledger = _beside_another_ledger(run_dir)
    assert society("ledger", "show", str(ledger), "--color", "never") == 0
    from_ledger = capsys.readouterr().out
    assert society("ledger", "show", str(run_dir), "--color", "never") == 0
    from_run = capsys.readouterr().out
    assert "DOES NOT VERIFY" not in from_run and "verified, complete" in from_run
    assert "artifacts   2 harvested files re-hashed: each matches the ledger" in from_run
    assert _timeline(from_run) == _timeline(from_ledger) and "acme.noted/v1" in from_run
    assert "artifacts" not in from_ledger.split("\n\n")[0], "a ledger alone has no run files"


def test_show_of_a_run_directory_whose_artifact_changed_exits_1_naming_the_file(
    run_dir: Path, capsys: Any
) -> None:
    target = _harvested(run_dir)[0]
    target.write_bytes(target.read_bytes() + b" ")
    assert society("ledger", "show", str(run_dir), "--color", "never") == 1
    out = capsys.readouterr().out
    assert "DO NOT MATCH (artifact-changed)" in out
    assert target.relative_to(run_dir).as_posix() in out
    assert _timeline(out), "the ledger's records are still shown"


def test_follow_of_a_finished_run_directory_prints_its_main_ledger_and_checks_its_artifacts(
    run_dir: Path, capsys: Any
) -> None:
    ledger = _beside_another_ledger(run_dir)
    assert society("ledger", "follow", str(ledger), "--json", "--timeout", "0") == 0
    from_ledger = capsys.readouterr()
    assert society("ledger", "follow", str(run_dir), "--json", "--timeout", "0") == 0
    from_run = capsys.readouterr()
    assert from_run.out == from_ledger.out and "acme.noted/v1" in from_run.out
    summary = json.loads(from_run.err.strip().splitlines()[-1])
    assert summary["valid"] is True
    assert summary["artifacts"] == {"checked": 2, "missing": 0, "changed": 0, "extra": 0}

    _harvested(run_dir)[0].unlink()
    assert society("ledger", "follow", str(run_dir), "--json", "--timeout", "0") == 1
    failed = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (failed["valid"], failed["reason"]) == (False, "artifact-missing")


def test_verify_and_grade_read_a_run_directory_as_its_main_ledger_beside_another(
    run_dir: Path, capsys: Any
) -> None:
    ledger = _beside_another_ledger(run_dir)
    _, from_ledger = _verify(ledger, capsys)
    _, from_run = _verify(run_dir, capsys)
    assert from_run["valid"] is True and from_run["runId"] == run_dir.name
    assert {k: v for k, v in from_run.items() if k != "artifacts"} == from_ledger
    grader = run_dir.parents[1] / "grader.py"
    for directory in (run_dir, ledger):
        assert society("grade", str(grader), str(directory)) == 0
        assert json.loads(capsys.readouterr().out) == {"noted": ["hello"]}


def test_compare_reads_a_run_directory_as_its_main_ledger_beside_another(
    run_dir: Path, capsys: Any
) -> None:
    ledger = _beside_another_ledger(run_dir)
    assert society("ledger", "compare", str(run_dir), str(ledger)) == 0, capsys.readouterr().out
    assert json.loads(capsys.readouterr().out)["same"] is True
    assert society("ledger", "compare", str(run_dir), str(run_dir / "ledger" / "aaa")) == 1
    assert json.loads(capsys.readouterr().out)["same"] is False


def test_view_reads_a_run_directory_as_its_main_ledger_beside_another(
    run_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    ledger = _beside_another_ledger(run_dir)
    pages = {}
    for name, directory in (("run", run_dir), ("ledger", ledger)):
        page = tmp_path / f"{name}.html"
        assert _society_main("view", directory, "-o", page) == 0
        pages[name] = json.loads(capsys.readouterr().out)
        assert pages[name]["verification"] == "self"
    records = sum(1 for _ in (ledger / "records.ndjson").open("rb"))
    assert pages["run"]["records"] == pages["ledger"]["records"] == records


def test_a_run_directory_whose_ledger_folder_is_empty_says_no_ledger_is_there_yet(
    tmp_path: Path, capsys: Any
) -> None:
    (tmp_path / "ledger").mkdir()
    code, line = _verify(tmp_path, capsys)
    assert code == 1 and line["reason"] == "manifest-missing"
    assert "not created it yet" in line["detail"]
    assert society("ledger", "show", str(tmp_path)) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "manifest-missing"


@pytest.mark.usefixtures("gcs")
def test_export_names_the_run_by_its_id_from_a_run_directory_or_its_ledger_directory(
    run_dir: Path, capsys: Any
) -> None:
    run_id = run_dir.name
    assert society("ledger", "export", str(run_dir), f"gs://{BUCKET}/runs") == 0
    assert json.loads(capsys.readouterr().out)["exported"] == f"gs://{BUCKET}/runs/{run_id}/"
    code, whole = _verify(f"gs://{BUCKET}/runs/{run_id}", capsys)
    assert code == 0 and whole["artifacts"]["checked"] == 2, whole

    ledger = run_dir / "ledger" / "main"
    assert society("ledger", "export", str(ledger), f"gs://{BUCKET}/ledgers") == 0
    assert json.loads(capsys.readouterr().out)["exported"] == f"gs://{BUCKET}/ledgers/{run_id}/"
    code, alone = _verify(f"gs://{BUCKET}/ledgers/{run_id}", capsys)
    assert code == 0 and alone["runId"] == run_id and "artifacts" not in alone, alone


# A run directory's layout is read strictly, and a hostile artifacts/ tree stays data.

DEPTH = 1500


def _changed_artifact(run_dir: Path) -> Path:
    target = run_dir / "artifacts" / "alice" / "workspace" / "policy.json"
    target.write_bytes(target.read_bytes() + b" ")
    return target


def test_ledger_files_copied_to_a_run_directorys_top_level_do_not_skip_its_artifact_check(
    run_dir: Path, capsys: Any
) -> None:
    _changed_artifact(run_dir)
    for name in ("manifest.json", "records.ndjson", "completion.json"):
        shutil.copy(run_dir / "ledger" / "main" / name, run_dir / name)
    code, line = _verify(run_dir, capsys)
    assert code == 1 and line["valid"] is False and line["reason"] == "run-layout-invalid", line
    grader = run_dir.parents[1] / "grader.py"
    assert society("grade", str(grader), str(run_dir)) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "run-layout-invalid"


def test_a_run_directory_without_its_ledger_folder_is_not_read_as_a_ledger(
    run_dir: Path, capsys: Any
) -> None:
    _changed_artifact(run_dir)
    for name in ("manifest.json", "records.ndjson", "completion.json"):
        shutil.copy(run_dir / "ledger" / "main" / name, run_dir / name)
    shutil.rmtree(run_dir / "ledger")
    code, line = _verify(run_dir, capsys)
    assert code == 1 and line["reason"] == "run-layout-invalid", line


def test_a_linked_ledger_folder_is_refused(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run_dir / "ledger" / "main", elsewhere)
    os.symlink(elsewhere, run_dir / "ledger" / "main")
    code, line = _verify(run_dir, capsys)
    assert code == 1 and line["reason"] == "run-layout-invalid", line


@pytest.fixture
def deep_run(run_dir: Path) -> Any:
    base = run_dir / "artifacts" / "alice" / "workspace"
    make_deep_tree(base, DEPTH)
    yield run_dir
    remove_deep_tree(base)


def test_an_artifacts_tree_1500_deep_gets_verifys_and_grades_one_line(
    deep_run: Path, capsys: Any
) -> None:
    code, line = _verify(deep_run, capsys)
    assert code == 1 and line["reason"] == "artifact-extra", line
    (problem,) = line["artifactProblems"]
    assert problem["path"].count("/d") == DEPTH and problem["path"].endswith("/planted")
    grader = deep_run.parents[1] / "grader.py"
    assert society("grade", str(grader), str(deep_run)) == 1
    failure = json.loads(capsys.readouterr().out)
    assert failure["reason"] == "artifact-extra" and failure["artifacts"]["extra"] == 1


NAMED_GRADER = """
from controller import EventCatalog
from spec import Noted
catalog = EventCatalog.make(Noted)
definition_id = {ident!r}

def grade(ledger):
    return {{"graded": True}}
"""


def test_a_grader_that_names_a_definition_id_requires_it_and_says_nothing_unchecked(
    run_dir: Path, capsys: Any
) -> None:
    grader = run_dir.parents[1] / "named_grader.py"
    grader.write_text(NAMED_GRADER.format(ident="acme.someone-elses/v1"))
    assert society("grade", str(grader), str(run_dir)) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "definition-mismatch"
    other = run_dir.parents[1] / "named_right.py"
    other.write_text(NAMED_GRADER.format(ident="acme.whole-run/v1"))
    assert society("grade", str(other), str(run_dir)) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"graded": True} and "not checked" not in captured.err
