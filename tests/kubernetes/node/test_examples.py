"""The shipped examples on the real-pod tests' kind cluster: their ledgers verify and grade as
they do on the local profile, through the same ``society ledger verify`` and ``society grade``
commands a user runs."""

# ruff: noqa: F811  (pytest fixtures imported from cluster_support are parameters here)
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_support import (  # noqa: F401 (fixtures)
    anyio_backend,
    artifacts,
    cluster_queue,
    left_in_cluster,
    on_cluster,
)
from cp_build import REPO_ROOT
from kind_plane import KindPlane

from controller import Run
from controller.run import ProgramFinished, Success
from controller.run.runid import new_run_id
from controller.run.spec import load_run_spec

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EXAMPLES = REPO_ROOT / "examples"
SOCIETY = [sys.executable, "-c", "import sys; from controller.cli import main; sys.exit(main())"]


def _society(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SOCIETY, *map(str, argv)], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )


@pytest.mark.parametrize("example", ["negotiation", "partition"])
async def test_an_example_runs_in_real_pods_on_kind_and_its_ledger_verifies_and_grades(
    control_plane: KindPlane, cluster_queue: str, tmp_path: Path, example: str
) -> None:
    spec = load_run_spec(EXAMPLES / f"{example}.py")
    run_id = new_run_id()
    async with on_cluster(control_plane, run_id, cluster_queue=cluster_queue) as (
        platform,
        kube,
        _,
    ):
        outcome = await Run.execute(
            spec, platform=platform, run_id=run_id, artifact_root=artifacts(tmp_path), seed=7
        )
        left = await left_in_cluster(kube, run_id)
    assert isinstance(outcome, ProgramFinished), outcome
    assert isinstance(outcome.exit, Success), outcome.exit
    assert outcome.receipt.complete and left == []
    run_dir = Path(outcome.receipt.ledger_dir).parents[1]

    verified = _society("ledger", "verify", run_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout.splitlines()[-1])["valid"] is True

    graded = _society("grade", EXAMPLES / "graders" / f"{example}.py", run_dir)
    assert graded.returncode == 0, graded.stdout + graded.stderr
