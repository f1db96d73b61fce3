"""A run directory's own events are decoded by the module the run kept, in that module's
sandbox, when a reader gives no ``--catalog``: the module's code never runs in the reader's
process, and a module that does not load leaves its events undecoded, saying why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOCIETY = (sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())")

HOSTILE = """
import os
from typing import ClassVar

from controller import Event, RunSpec, scripted

# What a handed-over run's module might try when a reader loads it: write outside its sandbox
# and read the runs beside its own.
for attempt in (lambda: open(MARKER, "w").write("reached the reader's machine"),
                lambda: os.listdir(SIBLINGS)):
    try:
        attempt()
    except OSError:
        pass


class Tallied(Event):
    tag: ClassVar[str] = "acme.tallied/v1"

    count: int


async def execute(ctx):
    await ctx.events.emit(Tallied(count=3))


run_spec = RunSpec.define(
    id="acme.kept/v1", agents={"ann": scripted()}, events=[Tallied], execute=execute
)
"""


def _society(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SOCIETY, *args], capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ), cwd=ROOT,
    )  # fmt: skip


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished run whose kept module tries, at import, what a hostile author would."""
    base = tmp_path_factory.mktemp("kept")
    marker = base / "marker"
    artifacts = base / "artifacts"
    (artifacts / "sr-someone-elses").mkdir(parents=True)
    module = base / "project" / "tallied.py"
    module.parent.mkdir()
    text = HOSTILE.replace("MARKER", repr(str(marker))).replace("SIBLINGS", repr(str(artifacts)))
    module.write_text(text)
    ran = _society("run", str(module), "--artifacts", str(artifacts))
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert not marker.exists(), "the run's own sandbox holds it"
    return artifacts / json.loads(ran.stdout)["runId"], marker


def test_verify_decodes_the_runs_own_events_with_its_kept_module(
    hostile_run: tuple[Path, Path],
) -> None:
    run_dir, marker = hostile_run
    shutil.rmtree(run_dir.parents[1] / "project")  # only the run directory's copy is left
    verified = _society("ledger", "verify", str(run_dir))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    line = json.loads(verified.stdout)
    assert line["valid"] is True and line["notDecoded"] == {}
    assert line["decodedBy"] == "kept module"
    assert not marker.exists(), "the kept module ran in its sandbox, not in the reader"
    shown = _society("ledger", "show", str(run_dir), "--color", "never")
    assert "acme.tallied/v1" in shown.stdout and "not decoded" not in shown.stdout


def test_a_record_the_kept_modules_class_refuses_fails_verification(
    hostile_run: tuple[Path, Path], tmp_path: Path
) -> None:
    """The module's real class checks each record: an own event whose bytes and signature are
    fine (written by a class of the same tag but another shape) but that the module's class
    refuses is a failed verification, where tags alone would have passed it."""
    run_dir, _ = hostile_run
    forged = tmp_path / run_dir.name
    shutil.copytree(run_dir, forged)
    writer = tmp_path / "forge.py"
    writer.write_text(FORGE)
    ledger = forged / "ledger" / "main"
    shutil.rmtree(ledger)
    done = subprocess.run(
        [sys.executable, str(writer), str(ledger), run_dir.name],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused = _society("ledger", "verify", str(forged / "ledger" / "main"))  # tags only: passes
    assert json.loads(refused.stdout)["notDecoded"] == {"acme.tallied/v1": 1}
    checked = _society("ledger", "verify", str(forged))
    line = json.loads(checked.stdout)
    assert line["valid"] is False, line
    assert "kept module refuses it" in line["detail"] and "count" in line["detail"]


FORGE = """
import sys
from pathlib import Path
from typing import ClassVar

import anyio

from ledger import Event, EventCatalog, Provenance, open_ledger_writer


class Tallied(Event):  # the module's tag, another shape
    tag: ClassVar[str] = "acme.tallied/v1"

    count: str


async def main(directory, run_id):
    async with open_ledger_writer(
        directory, catalog=EventCatalog.make(Tallied), definition_id="acme.kept/v1",
        run_id=run_id,
        provenance=Provenance(package_version="0", python_version="3", profile="local"),
    ) as writer:
        await writer.append(Tallied(count="three"), producer="program")
        await writer.complete()


anyio.run(main, Path(sys.argv[1]), sys.argv[2])
"""


def test_a_kept_module_that_does_not_load_leaves_its_events_undecoded_and_says_why(
    hostile_run: tuple[Path, Path], tmp_path: Path
) -> None:
    run_dir, _ = hostile_run
    broken = tmp_path / run_dir.name
    shutil.copytree(run_dir, broken)
    [kept] = (broken / "module").glob("*.py")
    kept.write_text("import no_such_package_here\n")
    verified = _society("ledger", "verify", str(broken))
    line = json.loads(verified.stdout)
    assert line["valid"] is True and line["notDecoded"] == {"acme.tallied/v1": 1}
    assert "decodedBy" not in line
    assert "the run's own events stay undecoded: its kept module" in verified.stderr
    assert "pass --catalog MODULE.py to decode them" in verified.stderr
