"""The bring-your-own-agent example runs keyless through ``society run`` (its module in its own
sandboxed process, as a researcher runs it), its ledger verifies, and its grader passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOCIETY = Path(sys.executable).parent / "society"


def society(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [str(SOCIETY), *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    result: dict[str, object] = json.loads(last)
    return result


def test_the_town_square_example_runs_keyless_and_its_grader_passes(tmp_path: Path) -> None:
    run = society("run", "--artifacts", str(tmp_path), "examples/byo/town_square.py")
    assert run["outcome"] == "ProgramFinished" and run["exit"] == "success", run
    ledger = str(run["ledger"])
    verified = society("ledger", "verify", ledger)
    assert verified["valid"] is True and verified["notDecoded"] == {}
    grade = society("grade", "examples/graders/byo_town_square.py", ledger)
    assert grade["passed"] is True, grade
    assert grade["modelCalls"] == {"ada": 1} and grade["messages"] == {
        "ada": 1,
        "host": 1,
        "nod": 1,
    }
