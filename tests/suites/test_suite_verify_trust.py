"""`society suite verify` trusts only what its caller gives: the suite module is an argument (a
handed-over folder's plan.json and matchup modules are never imported), and `--trusted-key` holds
every run's ledger to the operator's key."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from suite_support import society

from controller.suites import load_suite
from controller.suites.layout import Journal, SuiteFolder
from controller.suites.report import compute
from ledger import SigningKey

SUITE = """
from controller.agents import scripted
from controller.run import RunSpec
from controller.suites import Suite

async def execute(ctx):
    return None

def build(competitors):
    (name, _), = competitors.items()
    return RunSpec.define(id="acme.trust/v1", agents={name: scripted()}, execute=execute)

suite = Suite.define(
    id="trust-v1", competitors={"steady": 1, "other": 2}, build=build,
    matchups="single", seeds=[1], grader="grader.py", result="score",
)
"""
GRADER = """
from ledger import EventCatalog

catalog = EventCatalog.make()
definition_id = "acme.trust/v1"

def grade(ledger):
    return {"score": len(ledger)}
"""
HOSTILE = """
from pathlib import Path
Path({marker!r}).write_text("the folder's own code ran")
"""


@pytest.fixture(scope="module")
def signed_suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, SigningKey]:
    """(the suite module, its finished folder, the operator key every run was signed with)."""
    here = tmp_path_factory.mktemp("trusted-suite")
    module = here / "trust_suite.py"
    module.write_text(SUITE)
    (here / "grader.py").write_text(GRADER)
    key = SigningKey.generate()
    (here / "operator.pem").write_bytes(key.private_pem())
    os.environ["SOCIETY_SIGNING_KEY"] = str(here / "operator.pem")  # the suite's runs inherit it
    try:
        done = society("suite", "run", str(module), "--artifacts", str(here / "artifacts"))
    finally:
        del os.environ["SOCIETY_SIGNING_KEY"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["ranked"] == 2, done.stdout
    return module, here / "artifacts" / "trust-v1", key


def _verify(folder: Path, *argv: str) -> tuple[int, dict[str, object]]:
    done = society("suite", "verify", str(folder), *argv)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}


def _public(folder: Path, key: SigningKey, name: str) -> Path:
    path = folder / name
    path.write_text(key.public_key + "\n")
    return path


def test_suite_verify_with_the_operators_key_says_every_run_is_pinned(
    signed_suite: tuple[Path, Path, SigningKey], tmp_path: Path
) -> None:
    module, folder, key = signed_suite
    code, line = _verify(
        folder, "--suite", str(module), "--trusted-key", _public(tmp_path, key, "k.pub").as_posix()
    )
    assert code == 0, line
    assert (line["valid"], line["runs"], line["pinned"]) == (True, 2, 2)
    assert line["trustedKey"] == key.public_key and line["differences"] == []


def test_suite_verify_against_another_key_names_every_run_not_signed_by_it(
    signed_suite: tuple[Path, Path, SigningKey], tmp_path: Path
) -> None:
    module, folder, _ = signed_suite
    other = _public(tmp_path, SigningKey.generate(), "other.pub")
    code, line = _verify(folder, "--suite", str(module), "--trusted-key", str(other))
    assert code == 1 and line["valid"] is False and line["pinned"] == 0
    differences = line["differences"]
    assert isinstance(differences, list) and len(differences) == 2
    assert all("not signed by the trusted key (key-not-trusted" in str(d) for d in differences)
    assert _verify(folder, "--suite", str(module))[0] == 0, "self-attested, it still verifies"


def test_a_hostile_suite_folder_never_runs_its_own_code(
    signed_suite: tuple[Path, Path, SigningKey], tmp_path: Path
) -> None:
    module, original, _ = signed_suite
    folder = tmp_path / "handed-over" / original.name
    shutil.copytree(original, folder, ignore=shutil.ignore_patterns(".temporal"))
    marker = tmp_path / "marker"
    hostile = folder / "evil.py"
    hostile.write_text(HOSTILE.format(marker=str(marker)))
    (folder / "plan.json").write_text(json.dumps({"suite": "trust-v1", "module": str(hostile)}))
    for matchup in (folder / "matchups").glob("*.py"):
        matchup.write_text(HOSTILE.format(marker=str(marker)))

    named_by_folder = society("suite", "verify", str(folder))
    assert named_by_folder.returncode == 2 and "--suite" in named_by_folder.stderr
    code, line = _verify(folder, "--suite", str(module))
    assert code == 0 and line["valid"] is True, line
    assert not marker.exists(), "the folder's module was imported"


def test_a_journal_that_points_a_slot_at_a_ledger_outside_the_folder_is_not_counted(
    signed_suite: tuple[Path, Path, SigningKey], tmp_path: Path
) -> None:
    module, original, _ = signed_suite
    folder = tmp_path / "handed-over" / original.name
    shutil.copytree(original, folder, ignore=shutil.ignore_patterns(".temporal"))
    suite_folder = SuiteFolder(folder)
    slot = "steady/seed-1"
    run_id = Journal.read(suite_folder).latest[slot]
    outside = tmp_path / "handed-over" / "elsewhere"
    shutil.move(folder / "runs" / run_id, outside / run_id)  # a real ledger, beside the folder
    with (folder / "attempts.jsonl").open("a") as journal:
        journal.write(json.dumps({"slot": slot, "runId": f"../../elsewhere/{run_id}"}) + "\n")
        journal.write(
            json.dumps({"slot": slot, "runId": f"../../elsewhere/{run_id}", "seconds": 1}) + "\n"
        )
    report = compute(load_suite(module), suite_folder, Journal.read(suite_folder))
    steady = next(run for run in report.runs if run.slot.key == slot)
    assert (steady.status, steady.reason) == ("unverified", "run-id-invalid")
    assert report.ranked == 1

    resumed = society("suite", "run", str(module), "--artifacts", str(folder.parent))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    line = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (line["kept"], line["ran"], line["ranked"]) == (1, 1, 2), "the outside run was kept"
